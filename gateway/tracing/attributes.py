"""The names of the attributes the gateway's spans carry: the OpenTelemetry GenAI and HTTP
semantic conventions where one exists, Sluicegate's own under ``sluicegate.``.
None of them ever holds a prompt or a completion."""

from __future__ import annotations

# GenAI (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/)
OPERATION = "gen_ai.operation.name"
PROVIDER = "gen_ai.provider.name"
REQUEST_MODEL = "gen_ai.request.model"
REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"

# HTTP, network, errors
HTTP_METHOD = "http.request.method"
HTTP_ROUTE = "http.route"
HTTP_STATUS = "http.response.status_code"
URL_PATH = "url.path"
SERVER_ADDRESS = "server.address"
SERVER_PORT = "server.port"
ERROR_TYPE = "error.type"

# Sluicegate's own
TENANT = "sluicegate.tenant"
WORKLOAD_CLASS = "sluicegate.workload_class"
REQUEST_ID = "sluicegate.request_id"
RUN_ID = "sluicegate.run.id"
STREAM = "sluicegate.stream"
DECISION = "sluicegate.decision"
REASON = "sluicegate.reason"
POLICY = "sluicegate.policy"
POLICY_VERSION = "sluicegate.policy.version"
FLOW = "sluicegate.flow"
ESTIMATE_INPUT = "sluicegate.estimate.input_tokens"
ESTIMATE_OUTPUT = "sluicegate.estimate.output_tokens"
RETRY_AFTER = "sluicegate.retry_after_s"
DEGRADED_MODEL = "sluicegate.degraded.model"
DEGRADED_MAX_TOKENS = "sluicegate.degraded.max_tokens"
DEGRADED_STEPS = "sluicegate.degraded.steps"
SHADOWED = "sluicegate.shadowed_gates"
QUEUE_POSITION = "sluicegate.queue.position"
QUEUE_WAITED = "sluicegate.queue.waited_s"
QUEUE_RESULT = "sluicegate.queue.result"
BACKEND = "sluicegate.backend"
ATTEMPT = "sluicegate.attempt"
FAILOVER = "sluicegate.attempt.failure"
TTFT = "sluicegate.time_to_first_token_s"
OUTCOME = "sluicegate.outcome"
ASYNC_JOB = "sluicegate.async.job_id"
