"""The patched engine image of a profile (core): build plan, Dockerfile and apply script.

`servekit image build` turns a profile's `engine.patches` into a Docker build
context. The Dockerfile starts from `engine.image`, copies the filtered patches
to `/opt/servekit/patches/` and runs `apply-patches.sh` there, which finds the
installed `vllm` package with Python, checks each patch with `patch --dry-run`
and then applies it. The script is a file of the context, not an inline RUN
line, so tests run exactly what the image runs.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servekit import jsontext
from servekit.errors import ConfigError
from servekit.profiles.schema import Profile
from servekit.render.container import one_line
from servekit.render.documents import ImageManifest, PatchEntry
from servekit.render.patches import FilteredPatch, filter_patch

IMAGE_DIR = "/opt/servekit"
"""Where the image keeps the apply script and, under `patches/`, the applied diffs."""

DOCKERFILE = "Dockerfile"
APPLY_SCRIPT = "apply-patches.sh"
PATCH_DIR = "patches"
MANIFEST = "manifest.json"

FAILED_PREFIX = "servekit: build failed: "
"""Starts the apply script's line saying why the build stopped (servekit reports it)."""
FIX_PREFIX = "servekit: build fix: "
"""Starts the apply script's line saying how to fix it."""

LABEL_PATCHES = "io.servekit.patches"
LABEL_PROFILE = "io.servekit.profile"
LABEL_BASE = "io.servekit.base-image"
LABEL_OCI_BASE = "org.opencontainers.image.base.name"

_PATCH_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# An image reference as docker parses it: [registry[:port]/]path[:tag][@digest].
_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_HOST}(?:\.{_HOST})*(?::[0-9]+)?/)?{_PATH_PART}(?:/{_PATH_PART})*"
_TAG = r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
_DIGEST = r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
_IMAGE_REFERENCE = re.compile(rf"{_NAME}{_TAG}{_DIGEST}")
_TAG_REFERENCE = re.compile(rf"{_NAME}{_TAG}")


@dataclass(frozen=True, slots=True)
class ImagePlan:
    """What `docker build` makes: a base image, the patches on it and the tag.

    Attributes:
        profile: the profile's name.
        base_image: `engine.image`, the FROM line.
        tag: `engine.patched_image_tag`, the built image's name.
        patches: the profile's patches in order, each reduced to the `vllm/` package.
        warnings: compiled changes left out because the user allowed it.
    """

    profile: str
    base_image: str
    tag: str
    patches: tuple[FilteredPatch, ...]
    warnings: tuple[str, ...]


def check_buildable(profile: Profile) -> None:
    """Raise unless the profile describes a patched image servekit can build.

    Called before any patch is fetched, so a profile error costs no download.

    Raises:
        ConfigError: no patches, no or a malformed `patched_image_tag`, a malformed
            base image, or patch names that are not unique file-safe words.
    """
    engine = profile.engine
    if not engine.patches:
        raise ConfigError(
            f"profile {profile.name} has no engine.patches; nothing to build",
            fix=f"run {engine.image} as it is, or add patches to the profile",
        )
    if engine.patched_image_tag is None:
        raise ConfigError(
            f"profile {profile.name} has engine.patches but no engine.patched_image_tag",
            fix=f"set engine.patched_image_tag to the image to build, e.g. "
            f"{_suggested_tag(engine.image)}",
        )
    _check_reference("engine.image", engine.image, _IMAGE_REFERENCE)
    _check_reference("engine.patched_image_tag", engine.patched_image_tag, _TAG_REFERENCE)
    if engine.patched_image_tag == engine.image:
        raise ConfigError(
            f"engine.patched_image_tag {engine.patched_image_tag} is the base image itself",
            fix=f"choose a new tag such as {_suggested_tag(engine.image)}",
        )
    _check_patch_names([patch.name for patch in engine.patches])


def plan_image(
    profile: Profile, texts: Mapping[str, str], *, allow_skipped_compiled: bool = False
) -> ImagePlan:
    """Return the build plan of a profile's patched image.

    Args:
        profile: a profile with `engine.patches` and `engine.patched_image_tag`.
        texts: each patch's diff text, by patch name.
        allow_skipped_compiled: leave out changes to compiled sources with a warning
            instead of refusing to build.

    Raises:
        ConfigError: the profile cannot be built (see `check_buildable`), a patch text
            is missing or not a usable diff, a patch changes nothing under `vllm/`, or
            a patch changes compiled sources and `allow_skipped_compiled` is off.
    """
    check_buildable(profile)
    engine = profile.engine
    filtered: list[FilteredPatch] = []
    warnings: list[str] = []
    for patch in engine.patches:
        if patch.name not in texts:
            raise ConfigError(
                f"no text was given for patch {patch.name}",
                fix="pass the text of every patch in engine.patches",
            )
        result = filter_patch(patch.name, patch.url, texts[patch.name])
        if result.compiled:
            message = (
                f"patch {patch.name} changes compiled sources the installed wheel cannot "
                f"rebuild: {', '.join(result.compiled)}"
            )
            if not allow_skipped_compiled:
                raise ConfigError(
                    message,
                    fix="build vLLM from source with the patch, or pass "
                    "--allow-skipped-compiled to apply only its Python part",
                )
            warnings.append(f"{message}; they are left out (--allow-skipped-compiled)")
        if not result.applied:
            raise ConfigError(
                f"patch {patch.name} changes no file under vllm/, so the image would not change",
                fix="remove it from engine.patches",
            )
        filtered.append(result)
    assert engine.patched_image_tag is not None  # check_buildable refused None
    return ImagePlan(
        profile=profile.name,
        base_image=engine.image,
        tag=engine.patched_image_tag,
        patches=tuple(filtered),
        warnings=tuple(warnings),
    )


def patch_file(index: int, patch: FilteredPatch) -> str:
    """Return a patch's file name in `patches/`: its 1-based order, then its name."""
    return f"{index:02d}-{patch.name}.diff"


def labels(plan: ImagePlan) -> dict[str, str]:
    """Return the image's labels: the patches, the profile and the base image."""
    return {
        LABEL_PATCHES: ",".join(patch.name for patch in plan.patches),
        LABEL_PROFILE: plan.profile,
        LABEL_BASE: plan.base_image,
        LABEL_OCI_BASE: plan.base_image,
    }


def render_dockerfile(plan: ImagePlan) -> str:
    """Return the Dockerfile: FROM the base, copy and apply the patches, label the image.

    Label values are JSON strings with `$` escaped, which Dockerfile syntax reads back
    as the exact value (no variable expansion, no line break).
    """
    notes = [
        f"Generated by servekit image build from profile {plan.profile}; edit the profile "
        "and build again.",
        f"{plan.tag} is {plan.base_image} with these patches applied to its installed vllm:",
        *(f"{patch.name}: {patch.url}" for patch in plan.patches),
    ]
    label_lines = [f"{key}={_dockerfile_string(value)}" for key, value in labels(plan).items()]
    lines = [
        *(f"# {one_line(note)}".rstrip() for note in notes),
        f"FROM {plan.base_image}",
        f"COPY {PATCH_DIR}/ {IMAGE_DIR}/{PATCH_DIR}/",
        f"COPY {APPLY_SCRIPT} {IMAGE_DIR}/{APPLY_SCRIPT}",
        # Exec form: the image keeps its base's SHELL, and no shell re-reads the paths.
        "RUN " + json.dumps(["/bin/sh", f"{IMAGE_DIR}/{APPLY_SCRIPT}", f"{IMAGE_DIR}/{PATCH_DIR}"]),
        "LABEL " + " \\\n      ".join(label_lines),
    ]
    return "\n".join(lines) + "\n"


def render_apply_script(plan: ImagePlan) -> str:
    """Return the POSIX shell script that applies the plan's patches to the installed vllm.

    Run as `sh apply-patches.sh PATCH_DIR`. It installs `patch` with apt-get when the
    image lacks it, finds the directory holding the `vllm` package with Python
    (`$PYTHON`, else python3, else python; the package is located, not imported),
    then for each patch runs `patch --dry-run` and exits 1 naming the patch when it
    does not apply, before applying it for real.
    """
    calls = [
        "apply " + shlex.join([patch.name, patch_file(index, patch), one_line(patch.url)])
        for index, patch in enumerate(plan.patches, start=1)
    ]
    return _SCRIPT_HEAD + "\n".join(calls) + "\n"


def plan_document(plan: ImagePlan) -> ImageManifest:
    """Return the plan as a document: images, labels, and per patch its file, source and
    the paths applied, dropped and skipped as compiled."""
    return ImageManifest(
        profile=plan.profile,
        base_image=plan.base_image,
        tag=plan.tag,
        labels=labels(plan),
        patches=tuple(
            PatchEntry(
                name=patch.name,
                file=f"{PATCH_DIR}/{patch_file(index, patch)}",
                url=patch.url,
                applied=patch.applied,
                dropped=patch.dropped,
                skipped_compiled=patch.compiled,
            )
            for index, patch in enumerate(plan.patches, start=1)
        ),
        warnings=tuple(plan.warnings),
    )


def render_manifest(plan: ImagePlan) -> str:
    """Return `patches/manifest.json`, the plan document the image carries."""
    return jsontext.dumps(plan_document(plan).as_json(), indent=2, what="the patch manifest") + "\n"


def context_files(plan: ImagePlan) -> dict[str, str]:
    """Return every file of the build context, by path relative to the context directory."""
    files = {
        DOCKERFILE: render_dockerfile(plan),
        APPLY_SCRIPT: render_apply_script(plan),
        f"{PATCH_DIR}/{MANIFEST}": render_manifest(plan),
    }
    for index, patch in enumerate(plan.patches, start=1):
        files[f"{PATCH_DIR}/{patch_file(index, patch)}"] = patch.text
    return files


def docker_build_argv(plan: ImagePlan, context_dir: str) -> list[str]:
    """Return the `docker build` argument list for a context written to `context_dir`."""
    # --force-rm: a failed step's container is removed too, not left stopped in the daemon.
    return ["docker", "build", "--force-rm", "--tag", plan.tag, context_dir]


def describe_patches(plan: ImagePlan) -> list[str]:
    """Return one line per patch saying what is applied and what is left out."""
    lines = []
    for patch in plan.patches:
        line = f"{patch.name}: applies {_count(patch.applied)} under vllm/"
        if patch.dropped:
            line += f"; dropped (not in the installed package): {', '.join(patch.dropped)}"
        if patch.compiled:
            line += f"; skipped compiled: {', '.join(patch.compiled)}"
        lines.append(line)
    return lines


def _count(paths: Sequence[str]) -> str:
    return f"{len(paths)} file" if len(paths) == 1 else f"{len(paths)} files"


def _dockerfile_string(value: str) -> str:
    # Dockerfile double quotes honour \" and \\ as JSON does, and expand $VAR unless escaped.
    return json.dumps(value).replace("$", "\\$")


def _check_patch_names(names: Sequence[str]) -> None:
    # Names become file names, label items and words of the apply script.
    seen: set[str] = set()
    for name in names:
        if not _PATCH_NAME.fullmatch(name):
            raise ConfigError(
                f"patch name {name!r} is not a file-safe word",
                fix="use letters, digits, '.', '_' and '-', starting with a letter or digit",
            )
        if name in seen:
            raise ConfigError(
                f"patch name {name} appears twice in engine.patches",
                fix="give every patch its own name",
            )
        seen.add(name)


def _check_reference(field: str, value: str, pattern: re.Pattern[str]) -> None:
    if not pattern.fullmatch(value):
        raise ConfigError(
            f"{field} {value!r} is not a docker image reference",
            fix="write it as [registry/]name[:tag], e.g. vllm/vllm-openai:v0.25.1",
        )


def _suggested_tag(base_image: str) -> str:
    name, _, tag = base_image.partition("@")[0].rpartition(":")
    if name and "/" not in tag:
        return f"{name}:{tag}-patched"
    return f"{base_image.partition('@')[0]}:patched"


_SCRIPT_HEAD = f"""\
#!/bin/sh
# Applies servekit's patches to the installed vllm package (generated by servekit image build).
# Usage: sh {APPLY_SCRIPT} PATCH_DIR
# It stops at the first problem with a "{FAILED_PREFIX}" line (and a "{FIX_PREFIX}" line),
# which servekit reports as the build's error.
set -eu

patch_dir=${{1:?usage: sh {APPLY_SCRIPT} PATCH_DIR}}

fail() {{
  # fail FIX REASON...: the reason's words, then the fix, then exit 1.
  fix=$1
  shift
  echo "{FAILED_PREFIX}$*" >&2
  echo "{FIX_PREFIX}$fix" >&2
  exit 1
}}

if ! command -v patch >/dev/null 2>&1; then
  if ! command -v apt-get >/dev/null 2>&1; then
    fail "use a base image with GNU patch installed" \\
      "the base image has no 'patch' program and no apt-get to install it"
  fi
  echo "servekit: installing patch with apt-get" >&2
  if ! {{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive \\
      apt-get install -y -qq --no-install-recommends patch >/dev/null; }} >&2 ||
    ! command -v patch >/dev/null 2>&1; then
    fail "use a base image with GNU patch, or give the build access to a package mirror" \\
      "the base image has no 'patch' program and apt-get could not install it" \\
      "(can the build reach a package mirror?)"
  fi
  rm -rf /var/lib/apt/lists/*
fi

python=${{PYTHON:-}}
if [ -z "$python" ]; then
  if command -v python3 >/dev/null 2>&1; then python=python3; else python=python; fi
fi
if ! command -v "$python" >/dev/null 2>&1; then
  fail "use a vLLM image, or set PYTHON in the base image to its Python" \\
    "the base image has no $python to locate the vllm package with"
fi
# The directory that holds the installed vllm package (site-packages), found without
# importing vllm, so no GPU library loads at build time.
if ! site=$("$python" -c '
import importlib.util, os, sys
spec = importlib.util.find_spec("vllm")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
print(os.path.dirname(os.path.abspath(list(spec.submodule_search_locations)[0])))
'); then
  fail "set engine.image to a vLLM image (vllm/vllm-openai or one with vllm installed)" \\
    "no vllm package is installed for $python in the base image"
fi
echo "servekit: patching the vllm package in $site" >&2

failed_files() {{
  # The files named in patch's output with a failed hunk or not found, comma-separated.
  current=""
  found=""
  while IFS= read -r line; do
    case $line in
      "checking file "*) current=${{line#checking file }} ;;
      "|+++ "*) current=${{line#"|+++ "}}; current=${{current#b/}} ;;
      "Hunk #"*" FAILED "* | "No file to patch."*)
        case ", $found," in
          *", $current,"*) ;;
          *) found=${{found:+$found, }}$current ;;
        esac ;;
    esac
  done <"$1"
  printf '%s' "$found"
}}

apply() {{
  name=$1
  file=$patch_dir/$2
  source=$3
  log=$(mktemp)
  if ! patch --dry-run -p1 --batch --forward -d "$site" <"$file" >"$log" 2>&1; then
    cat "$log" >&2
    if patch --dry-run -R -p1 --force -d "$site" <"$file" >/dev/null 2>&1; then
      rm -f "$log"
      fail "remove it from engine.patches, or set engine.image to an unpatched image" \\
        "patch $name ($source) is already applied to the vllm package in $site"
    fi
    files=$(failed_files "$log")
    rm -f "$log"
    fail "use the patch made for this image's vLLM version, or the engine.image it was made for" \\
      "patch $name ($source) does not apply to the vllm package in $site" \\
      "(${{files:-see the output of patch above}}); it was made for another vLLM version"
  fi
  rm -f "$log"
  patch -p1 --batch --forward --no-backup-if-mismatch -d "$site" <"$file" >&2
  echo "servekit: applied patch $name" >&2
}}

"""  # noqa: S608 - a shell script; its "update ... set" words are not SQL
