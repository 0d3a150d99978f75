# Sluicegate gateway: slim, non-root, with a health check.
#   docker build -t sluicegate .
#   docker run -p 8080:8080 -v $PWD/config.yaml:/etc/sluicegate/config.yaml:ro sluicegate
FROM python:3.11-slim AS build
# gcc: the wheel's decision core is compiled with mypyc (setup.py); SLUICEGATE_COMPILE=1 fails
# the image build rather than ship a plain-Python core. The runtime stage needs no compiler.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY commands ./commands
COPY gateway ./gateway
COPY policies ./policies
COPY emulator ./emulator
COPY simulation ./simulation
# EXTRAS: optional features to build in, e.g. --build-arg EXTRAS=epp,kubernetes for the
# Endpoint Picker with InferencePool discovery (deploy/kubernetes/epp/); every wheel built
# here is installed below.
ARG EXTRAS=""
RUN SLUICEGATE_COMPILE=1 pip wheel --no-cache-dir --wheel-dir /wheels ".${EXTRAS:+[$EXTRAS]}"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
 && python -c "import sys, policies.build as b; sys.exit(b.core() != 'compiled')" \
 && (python -c "import importlib.util as u, sys; sys.exit(u.find_spec('xds') is not None and u.find_spec('opentelemetry.proto') is not None)" \
     || pip install --no-cache-dir --force-reinstall --no-deps "opentelemetry-proto==$(python -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))')") \
 && useradd --system --uid 10001 --no-create-home sluicegate
COPY config.example.yaml /etc/sluicegate/config.yaml
USER 10001
EXPOSE 8080
# /healthz: the process is alive (readiness, i.e. a healthy backend, is /readyz).
HEALTHCHECK --interval=10s --timeout=2s --start-period=5s --retries=3 \
  CMD python -c "import urllib.request,sys; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"
ENTRYPOINT ["sluicegate", "serve"]
CMD ["--config", "/etc/sluicegate/config.yaml", "--host", "0.0.0.0", "--port", "8080"]
