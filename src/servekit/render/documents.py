"""The documents of `render` and `image build` (core): `render --json`, the patch manifest a
patched image carries and `image build --json` (docs/schemas/render.schema.json,
image-build.schema.json)."""

from __future__ import annotations

from typing import Literal

from servekit.results import Document

IMAGE_BUILD_VERSION: Literal[1] = 1
RENDER_VERSION: Literal[1] = 1


class RenderDocument(Document):
    """`servekit render --json`: one launch artifact and the command inside it.

    Attributes:
        profile: the profile rendered.
        target: the artifact kind (vllm, docker, compose, k8s, lws, script).
        content: the artifact's text, as written to -o.
        argv: the `vllm serve` command line the artifact runs.
        env: the environment it sets (values from the profile; secrets are referenced by
            name through secret_env, never held here).
        output: the file written (None when printed only).
    """

    schema_version: Literal[1]
    profile: str
    target: str
    content: str
    argv: tuple[str, ...]
    env: dict[str, str]
    output: str | None


class PatchEntry(Document):
    """One patch of the image.

    Attributes:
        name: the profile's name for it.
        file: where it lies in the build context.
        url: where it was fetched from.
        applied: the paths it changes in the image.
        dropped: paths it touches that the image does not hold (tests, docs), left out.
        skipped_compiled: paths of compiled code it cannot change in an installed wheel.
    """

    name: str
    file: str
    url: str
    applied: tuple[str, ...]
    dropped: tuple[str, ...]
    skipped_compiled: tuple[str, ...]


class ImageManifest(Document):
    """The image plan (`patches/manifest.json` in the image): images, labels, patches."""

    profile: str
    base_image: str
    tag: str
    labels: dict[str, str]
    patches: tuple[PatchEntry, ...]
    warnings: tuple[str, ...]


class ImageBuildDocument(Document):
    """`servekit image build --json`: the plan, the build context and what was run.

    Attributes:
        image: the image plan, as the image's manifest holds it.
        context: the build context directory.
        context_kept: the context is left on disk (--context or --dry-run).
        dockerfile: the Dockerfile's text.
        command: the `docker build` command line.
        dry_run: nothing was built.
        built: the image was built.
    """

    schema_version: Literal[1]
    image: ImageManifest
    context: str
    context_kept: bool
    dockerfile: str
    command: tuple[str, ...]
    dry_run: bool
    built: bool
