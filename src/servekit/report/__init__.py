"""Reports (shell): terminal views, Markdown, self-contained HTML and PNG plots."""
