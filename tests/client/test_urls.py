"""URL helpers: credentials recognised the way a lenient client reads a URL."""

from __future__ import annotations

import pytest

from servekit.client.urls import has_credentials, mask_credentials


@pytest.mark.parametrize(
    "url",
    [
        "https://ops:pw@host/x.diff",
        "https://token@host/x.diff",  # a user alone (a token) is a credential too
        "https://ops:pw/secret@host/x.diff",  # urllib: host "ops"; curl: password "pw/secret"
        "file://ops:pw@localhost/tmp/x.diff",
        "ftp://ops:pw/x@host/x.diff",
        "//ops:pw/x@host/x.diff",
        "HTTPS://ops:pw@host/x.diff?a=1#b",
    ],
)
def test_credentials_are_recognised_in_any_scheme(url: str) -> None:
    """userinfo in the authority, or an @ past a / with a : before it, in any scheme."""
    assert has_credentials(url)
    assert "pw" not in mask_credentials(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/vllm-project/vllm/pull/49149.diff",
        "https://host/pkg@1.0/x.diff",  # an @ in the path with no : before it
        "https://host/x.diff?user=a:b@c",  # after the ? it is the query
        "https://host/x.diff#a:b@c",
        "patches/ops:pw@x.diff",  # a local path, no URL
        "/tmp/x.diff",
    ],
)
def test_no_credentials_are_seen_where_there_are_none(url: str) -> None:
    """An @ in a path without a : before it, or in a query or fragment, is no credential."""
    assert not has_credentials(url)
