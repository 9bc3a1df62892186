"""Build a profile's patched engine image (shell): fetch patches, write the context, run docker.

`prepare_build` does everything up to the `docker build` command: it reads or
downloads each patch, makes the plan (`servekit.render.image`) and writes the
context directory. `run_docker_build` runs that command with an argument list,
never through a shell, and hands each line of docker's output to a callback as
it arrives; a failed build becomes one error saying why (`BuildOutput`): the
apply script's reason, a base image that is not there, or docker's last line.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from servekit.client.download import fetch_bytes
from servekit.client.urls import (
    file_url_path,
    has_credentials,
    is_http_url,
    mask_credentials,
    url_scheme,
)
from servekit.errors import ConfigError, Interrupted, ServekitError
from servekit.profiles.schema import Profile
from servekit.render.image import (
    DOCKERFILE,
    FAILED_PREFIX,
    FIX_PREFIX,
    ImagePlan,
    check_buildable,
    context_files,
    docker_build_argv,
    plan_image,
)

DOWNLOAD_TIMEOUT_S = 30.0
"""Seconds a patch download may take to connect and between reads."""

MAX_PATCH_BYTES = 32 * 2**20
"""The largest patch accepted (a pull request's diff is rarely over a few hundred KiB)."""

INSPECT_TIMEOUT_S = 30.0
"""Seconds `docker image inspect` of the base image may take after a failed build."""

CONTEXT_MARKER = ".servekit-image-context"
"""File that marks a directory as a servekit build context, safe to rewrite."""


@dataclass(frozen=True, slots=True)
class PreparedBuild:
    """A written build context and the command that builds it.

    Attributes:
        plan: what the image holds.
        context_dir: the directory written.
        argv: the `docker build` argument list.
        dockerfile: the Dockerfile's text, as written.
        temporary: True when servekit chose the directory (no `--context`).
    """

    plan: ImagePlan
    context_dir: Path
    argv: list[str]
    dockerfile: str
    temporary: bool


def read_patch(url: str, *, cwd: Path, timeout_s: float = DOWNLOAD_TIMEOUT_S) -> str:
    """Return a patch's text from an http(s) URL, a file:// URL or a local path.

    Args:
        url: the patch's `url` from the profile.
        cwd: the directory a relative path is resolved against.
        timeout_s: download timeout.

    Raises:
        ConfigError: the URL holds credentials (`has_credentials`, any scheme; the message
            masks them), the download failed, the file is missing or unreadable, or the
            text is not UTF-8; the message names the URL or path.
    """
    if has_credentials(url):  # any scheme: the password must reach no message or file
        raise ConfigError(  # urllib would not send them, and its errors would quote them
            f"patch {mask_credentials(url)} has user:password@ credentials, which servekit "
            "does not send (nor write into the image's labels and manifest)",
            fix="download it yourself and set the patch's url to the local file",
        )
    if is_http_url(url):
        try:
            data = fetch_bytes(url, timeout_s=timeout_s, max_bytes=MAX_PATCH_BYTES)
        except OSError as exc:
            raise ConfigError(
                f"cannot download patch {url}: {exc}",
                fix="download it yourself and set the patch's url to the local file",
            ) from None
    else:
        path = _local_path(url, cwd)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ConfigError(
                f"patch file {path} does not exist",
                fix="set the patch's url to an existing file (relative paths are resolved "
                "against the current directory) or an http(s) URL",
            ) from None
        except OSError as exc:
            raise ConfigError(
                f"cannot read patch file {path}: {exc.strerror}",
                fix="check engine.patches[].url and the file's permissions",
            ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"patch {url} is not UTF-8 text", fix="save the diff as UTF-8") from None


def prepare_build(
    profile: Profile,
    *,
    context_dir: Path | None,
    cwd: Path,
    allow_skipped_compiled: bool = False,
) -> PreparedBuild:
    """Fetch the profile's patches, plan the image and write its build context.

    Args:
        profile: a profile with `engine.patches` and `engine.patched_image_tag`.
        context_dir: where to write the context (relative to `cwd`); a new temporary
            directory when None.
        cwd: the directory relative patch and context paths are resolved against.
        allow_skipped_compiled: build without a patch's compiled-source changes.

    Raises:
        ConfigError: the profile cannot be built, a patch cannot be fetched or used,
            or the context directory holds files servekit did not write.
    """
    check_buildable(profile)
    texts = {patch.name: read_patch(patch.url, cwd=cwd) for patch in profile.engine.patches}
    plan = plan_image(profile, texts, allow_skipped_compiled=allow_skipped_compiled)
    temporary = context_dir is None
    directory = (
        Path(tempfile.mkdtemp(prefix="servekit-image-"))
        if context_dir is None
        else cwd / context_dir
    )
    files = context_files(plan)
    write_context(files, directory)
    return PreparedBuild(
        plan=plan,
        context_dir=directory,
        argv=docker_build_argv(plan, str(directory)),
        dockerfile=files[DOCKERFILE],
        temporary=temporary,
    )


def write_context(files: dict[str, str], directory: Path) -> None:
    """Write the context files into a new, empty or earlier servekit context directory.

    Everything servekit wrote there before is removed first, so a patch dropped from
    the profile cannot linger in `patches/` and end up in the image.

    Raises:
        ConfigError: the directory holds other files, or cannot be written.
    """
    try:
        if directory.exists() and any(directory.iterdir()):
            if not (directory / CONTEXT_MARKER).is_file():
                raise ConfigError(
                    f"build context directory {directory} is not empty and was not written "
                    "by servekit",
                    fix="pass --context a new or empty directory",
                )
            shutil.rmtree(directory)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / CONTEXT_MARKER).write_text("", encoding="utf-8")
        for relative, text in files.items():
            target = directory / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            # Bytes, so a diff's line endings reach `patch` exactly as they were.
            target.write_bytes(text.encode("utf-8"))
    except OSError as exc:
        raise ConfigError(
            f"cannot write the build context in {directory}: {exc.strerror or exc}",
            fix="pass --context a writable directory",
        ) from None


def build_image(prepared: PreparedBuild, *, on_output: Callable[[str], None]) -> None:
    """Run the prepared `docker build`; a temporary context is removed once it succeeds.

    A context that failed to build is kept, and the error names it, so the
    Dockerfile and patches can be inspected.

    Raises:
        ServekitError: docker is not installed, or the build failed; the message is
            the reason (the patch that does not apply, the missing base image, or
            docker's last error line).
        Interrupted: the user pressed Ctrl-C; docker was stopped.
    """
    try:
        run_docker_build(prepared.argv, on_output=on_output, base_image=prepared.plan.base_image)
    except ServekitError as exc:
        raise type(exc)(
            f"{exc.message} (build context kept in {prepared.context_dir})", fix=exc.fix
        ) from None
    if prepared.temporary:
        shutil.rmtree(prepared.context_dir, ignore_errors=True)


class BuildOutput:
    """Reads `docker build`'s output line by line: what to show and why a build failed.

    It remembers the apply script's `servekit: build failed:` and `build fix:` lines
    (found anywhere in a line, as BuildKit prefixes step numbers) and docker's last
    line, and folds the legacy builder's several-line deprecation notice into one line.
    """

    def __init__(self) -> None:
        self.reason: str | None = None
        self.fix: str | None = None
        self.last_line: str | None = None
        self._in_notice = False

    def feed(self, line: str) -> str | None:
        """Take one line of output (without its newline); return the line to show, or None."""
        if self._in_notice:
            if line.startswith(" ") and line.strip():
                return None  # the notice's indented continuation lines
            self._in_notice = False
            if not line.strip():
                return None
        if line.startswith(_LEGACY_NOTICE):
            self._in_notice = True
            return LEGACY_BUILDER_NOTE
        if (at := line.find(FAILED_PREFIX)) >= 0:
            self.reason = line[at + len(FAILED_PREFIX) :].strip()
        elif (at := line.find(FIX_PREFIX)) >= 0:
            self.fix = line[at + len(FIX_PREFIX) :].strip()
        if line.strip():
            self.last_line = line.strip()
        return line

    def failure(self, returncode: int, *, base_image_missing: bool, base_image: str | None
                ) -> ServekitError:  # fmt: skip
        """Return the error of a build that exited with `returncode`."""
        said = _docker_said(self.last_line)
        if self.reason is not None:
            return ServekitError(self.reason, fix=self.fix)
        if base_image_missing and base_image is not None:
            return ServekitError(
                f"base image {base_image} is not on this machine and could not be pulled"
                + (f": {said}" if said else ""),
                fix=f"pull or load it first (docker pull {base_image}, or docker load), or "
                "set engine.image to an image this machine has",
            )
        return ServekitError(
            f"docker build exited with code {returncode}" + (f": {said}" if said else ""),
            fix="read docker's output above",
        )


LEGACY_BUILDER_NOTE = (
    "docker: the legacy builder is deprecated; install the buildx component to build with BuildKit"
)
"""The one line shown for the docker CLI's several-line notice about its legacy builder."""

_LEGACY_NOTICE = "DEPRECATED: The legacy builder is deprecated"
_DAEMON_PREFIX = "Error response from daemon: "


def run_docker_build(
    argv: Sequence[str], *, on_output: Callable[[str], None], base_image: str | None = None
) -> None:
    """Run `docker build`, passing each line of its output (stdout and stderr) to on_output.

    Args:
        argv: the `docker build` command.
        on_output: called with each line to show (the legacy builder's deprecation
            notice is folded into one line).
        base_image: the FROM image; when the build fails and it is not in the local
            image store, the error says so.

    Raises:
        ServekitError: docker is not installed, or the build exited non-zero (see
            `BuildOutput.failure`).
        Interrupted: the user pressed Ctrl-C; docker was stopped.
    """
    if shutil.which(argv[0]) is None:
        raise ServekitError(
            f"{argv[0]} was not found on PATH, so the image cannot be built here",
            fix="install the docker CLI, or run with --dry-run and build the written "
            "context on a machine that has docker",
        )
    output = BuildOutput()
    try:
        process = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        raise ServekitError(
            f"cannot run {argv[0]}: {exc.strerror or exc}",
            fix="check that docker is installed and on PATH",
        ) from None
    with process:
        assert process.stdout is not None  # stdout=PIPE
        try:
            for line in process.stdout:
                if (shown := output.feed(line.rstrip("\n"))) is not None:
                    on_output(shown)
        except KeyboardInterrupt:
            process.terminate()
            process.wait()
            raise Interrupted(
                "docker build was interrupted; no image was tagged",
                fix="run servekit image build again; docker reuses its cached layers",
            ) from None
    if process.returncode != 0:
        missing = (
            output.reason is None and base_image is not None and _image_missing(argv[0], base_image)
        )
        raise output.failure(process.returncode, base_image_missing=missing, base_image=base_image)


def _image_missing(docker: str, image: str) -> bool:
    """True when the daemon answers that it has no image `image` (not when it is down)."""
    try:
        result = subprocess.run(
            [docker, "image", "inspect", "--format", "{{.Id}}", image],
            capture_output=True,
            text=True,
            timeout=INSPECT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode != 0 and "no such image" in result.stderr.lower()


def _docker_said(line: str | None) -> str:
    if line is None:
        return ""
    return line.removeprefix(_DAEMON_PREFIX).strip()


def _local_path(url: str, cwd: Path) -> Path:
    if (path := file_url_path(url)) is not None:
        return Path(path)
    scheme = url_scheme(url)
    if scheme and len(scheme) > 1:
        raise ConfigError(
            f"patch url {url!r} uses the unsupported scheme {scheme}:",
            fix="use an http(s) URL or a local file path",
        )
    return cwd / Path(url).expanduser()
