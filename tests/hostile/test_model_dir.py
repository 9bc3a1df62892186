"""Hostile model directories: shard paths escaping the directory, file contents in errors,
paths that are files, FIFOs or symlink loops (plan --model-dir and doctor)."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from safetensors.numpy import save_file

from servekit.cli.main import cli
from servekit.doctor.findings import model_dir_findings
from servekit.doctor.probes import probe_model_dir
from servekit.errors import ModelDirError
from servekit.plan.checkpoint import read_checkpoint

CANARY = "CANARY-7f3a-do-not-print"
M3 = "minimax-m3-mxfp8-8xa800"


def outside_secret(tmp_path: Path) -> Path:
    """A file outside the model directory whose text must never be read into a message."""
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_text(f"root:{CANARY}:0:0::/root:/bin/sh\n")
    return secret


def model_dir(tmp_path: Path, weight_map: dict[str, str] | None = None) -> Path:
    """A model directory with config.json, one real shard and an index (given or true)."""
    root = tmp_path / "model"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(root / "model-1.safetensors"))
    index = {"weight_map": weight_map or {"w": "model-1.safetensors"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    return root


def refused(root: Path, pattern: str) -> str:
    """read_checkpoint raises a ModelDirError matching pattern that never shows the secret."""
    with pytest.raises(ModelDirError, match=pattern) as caught:
        read_checkpoint(root)
    text = str(caught.value)
    assert CANARY not in text
    assert "root:" not in text
    return text


def test_traversal_in_the_index_is_refused(tmp_path: Path) -> None:
    """An index entry ../../outside/passwd is refused without opening the file."""
    outside_secret(tmp_path)
    root = model_dir(tmp_path, {"w": "model-1.safetensors", "x": "../outside/passwd"})
    refused(root, "'../outside/passwd' is not a path inside it")


def test_absolute_path_in_the_index_is_refused(tmp_path: Path) -> None:
    """An absolute shard path is refused even when the file exists."""
    secret = outside_secret(tmp_path)
    root = model_dir(tmp_path, {"w": str(secret)})
    refused(root, "is not a path inside it")


def test_symlinked_shard_pointing_outside_is_refused(tmp_path: Path) -> None:
    """A shard in the index that is a symlink to a file elsewhere is refused."""
    secret = outside_secret(tmp_path)
    root = model_dir(tmp_path, {"w": "model-1.safetensors", "x": "model-2.safetensors"})
    (root / "model-2.safetensors").symlink_to(secret)
    refused(root, "'model-2.safetensors' resolves outside the model directory")


def test_globbed_symlink_pointing_outside_is_refused(tmp_path: Path) -> None:
    """Without an index, a *.safetensors symlink out of the directory is refused too."""
    secret = outside_secret(tmp_path)
    root = model_dir(tmp_path)
    (root / "model.safetensors.index.json").unlink()
    (root / "evil.safetensors").symlink_to(secret)
    refused(root, "resolves outside the model directory")


def test_config_symlink_pointing_outside_is_refused(tmp_path: Path) -> None:
    """config.json itself may not resolve outside the directory."""
    secret = outside_secret(tmp_path)
    root = model_dir(tmp_path)
    (root / "config.json").unlink()
    (root / "config.json").symlink_to(secret)
    refused(root, "resolves outside the model directory")


def test_hugging_face_cache_snapshot_is_read(tmp_path: Path) -> None:
    """A hub cache snapshot, whose files are symlinks into ../../blobs, is still read."""
    repo = tmp_path / "models--org--tiny"
    src = model_dir(tmp_path)
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for i, file in enumerate(sorted(src.iterdir())):
        blob = repo / "blobs" / f"sha{i}"
        file.rename(blob)
        (snapshot / file.name).symlink_to(Path("../../blobs") / blob.name)
    info = read_checkpoint(snapshot)
    assert (info.shard_count, info.total_bytes) == (1, 64)


def test_shard_contents_never_appear_in_errors(tmp_path: Path) -> None:
    """A shard that is really a text file: the error shows neither its bytes nor the
    header length they spell."""
    root = model_dir(tmp_path)
    shard = root / "model-1.safetensors"
    shard.write_text(f"{CANARY} and more text that is not a safetensors file\n")
    text = refused(root, "declares a header over the format's")
    (spelled,) = struct.unpack("<Q", CANARY.encode()[:8])
    assert str(spelled) not in text


def test_header_entry_contents_never_appear_in_errors(tmp_path: Path) -> None:
    """A malformed tensor entry is described, not echoed."""
    root = model_dir(tmp_path)
    header = json.dumps({"w": {"dtype": "F32", "note": CANARY}}).encode()
    (root / "model-1.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    refused(root, "needs a dtype, a shape and two data_offsets")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_shard_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO named like a shard is refused at once instead of blocking the reader."""
    root = model_dir(tmp_path)
    (root / "model.safetensors.index.json").unlink()
    os.mkfifo(root / "pipe.safetensors")
    started = time.monotonic()
    refused(root, "is a FIFO, not a safetensors file")
    assert time.monotonic() - started < 5


def test_plan_model_dir_traversal_is_one_line(tmp_path: Path) -> None:
    """plan --model-dir on a traversal index exits 1 with one line and no file contents."""
    outside_secret(tmp_path)
    root = model_dir(tmp_path, {"w": "../outside/passwd"})
    result = CliRunner().invoke(cli, ["plan", M3, "--model-dir", str(root)])
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert CANARY not in result.stderr + result.stdout
    (spelled,) = struct.unpack("<Q", b"root:" + CANARY.encode()[:3])
    assert str(spelled) not in result.stderr


def test_doctor_says_a_file_is_a_file(tmp_path: Path) -> None:
    """A model path that is a regular file is reported as a file, not as missing."""
    path = tmp_path / "weights.safetensors"
    path.write_bytes(b"x")
    (finding,) = model_dir_findings(probe_model_dir("model", "/models/m", str(path)))
    assert finding.severity == "error"
    assert "is a file, not a directory" in finding.title
    assert "not found" not in finding.title


def test_doctor_says_a_symlink_loop_is_a_loop(tmp_path: Path) -> None:
    """doctor --model-dir on a symlink loop names the loop."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    result = CliRunner().invoke(cli, ["doctor", M3, "--model-dir", str(loop), "--json"])
    document = json.loads(result.stdout)
    titles = [f["title"] for f in document["findings"] if f["check"] == "model"]
    assert any("is a symlink loop, not a directory" in t for t in titles), titles


def test_plan_model_dir_symlink_loop_says_so(tmp_path: Path) -> None:
    """read_checkpoint on a symlink loop says it is one."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(ModelDirError, match="is a symlink loop, not a directory"):
        read_checkpoint(loop)


def _not_a_directory(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "model"
    if kind == "a symlink loop":
        path.symlink_to(path)
    elif kind == "a file":
        path.write_bytes(b"x")
    elif kind == "a FIFO":
        os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["a symlink loop", "a file", "a FIFO"])
def test_plan_model_dir_says_what_the_path_is_like_doctor(kind: str, tmp_path: Path) -> None:
    """plan --model-dir on a symlink loop, a file or a FIFO: one usage line saying what the
    path is, in doctor's words (not click's "does not exist"), and nothing read from it."""
    path = _not_a_directory(tmp_path, kind)
    result = CliRunner().invoke(cli, ["plan", M3, "--model-dir", str(path)])
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"servekit: error: --model-dir: model path {path} is {kind}, not a directory; point "
        "it at the checkpoint directory (the one holding config.json)"
    ]
    (finding,) = model_dir_findings(probe_model_dir("model", str(path), str(path)))
    assert finding.title == f"model path {path} is {kind}, not a directory"


def test_plan_model_dir_that_is_missing_says_not_found(tmp_path: Path) -> None:
    """plan --model-dir on a path with nothing there: doctor's "not found" line, exit 2."""
    result = CliRunner().invoke(cli, ["plan", M3, "--model-dir", str(tmp_path / "none")])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(
        f"servekit: error: --model-dir: model directory {tmp_path / 'none'} not found; "
    )
