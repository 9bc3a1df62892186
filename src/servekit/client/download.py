"""Plain HTTP(S) downloads of small files, such as a pull request's diff (shell).

Synchronous and bounded: one GET with a timeout and a size cap. Failures raise
`OSError` (urllib's errors are subclasses), so the caller words the fix.
"""

from __future__ import annotations

import http.client
import urllib.error
import urllib.request

from servekit import __version__
from servekit.client.urls import is_http_url


def fetch_bytes(url: str, *, timeout_s: float, max_bytes: int) -> bytes:
    """Return the body of a GET of an http(s) URL, following redirects.

    Args:
        url: an http:// or https:// URL.
        timeout_s: seconds allowed for connecting and for each read.
        max_bytes: the largest body accepted.

    Raises:
        ValueError: the URL is not http(s).
        OSError: the server was unreachable or too slow, answered with an HTTP error,
            or sent more than `max_bytes`.
    """
    if not is_http_url(url):
        raise ValueError(f"{url!r} is not an http(s) URL")
    # S310: the scheme was checked above, so no file:// or custom scheme is reachable.
    headers = {"User-Agent": f"servekit/{__version__}"}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            body: bytes = response.read(max_bytes + 1)
    except urllib.error.HTTPError as exc:
        exc.close()  # an HTTP error holds the open response; release its socket
        raise OSError(f"the server answered HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise OSError(str(exc.reason)) from None
    except (http.client.HTTPException, ValueError) as exc:  # a cut body, a malformed URL
        raise OSError(f"{type(exc).__name__}: {exc}") from None
    if len(body) > max_bytes:
        raise OSError(f"the response is larger than {max_bytes} bytes")
    return body
