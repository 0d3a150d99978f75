"""Finding vLLM's processes by process group in a /proc tree (a fake one: the real pinning is
checked against a live server in tests/vllm/test_vllm_direct.py)."""

from __future__ import annotations

from pathlib import Path

from scripts.vllm.engine_affinity import group_processes, pin_engine_core_beside_worker


def _process(proc: Path, pid: int, comm: str, pgrp: int) -> None:
    entry = proc / str(pid)
    entry.mkdir()
    (entry / "comm").write_text(comm + "\n")
    (entry / "stat").write_text(f"{pid} ({comm}) S 1 {pgrp} {pgrp} 0 -1 4194560 0 0\n")


def test_group_members_are_found_by_pgrp_even_when_comm_holds_spaces_and_parentheses(
    tmp_path: Path,
) -> None:
    _process(tmp_path, 100, "python", 100)
    _process(tmp_path, 101, "VLLM::EngineCor", 100)
    _process(tmp_path, 102, "a (b) c", 100)  # the parser must cut at the last ')'
    _process(tmp_path, 200, "VLLM::Worker", 200)  # another server's group
    (tmp_path / "self").mkdir()  # not a pid
    assert group_processes(100, tmp_path) == {100: "python", 101: "VLLM::EngineCor", 102: "a (b) c"}


def test_nothing_is_pinned_without_both_a_worker_and_an_engine_core(tmp_path: Path) -> None:
    _process(tmp_path, 100, "python", 100)
    _process(tmp_path, 101, "VLLM::EngineCor", 100)
    assert pin_engine_core_beside_worker(100, tmp_path) is None
