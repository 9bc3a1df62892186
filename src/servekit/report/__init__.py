"""Reports (shell): terminal views, Markdown, self-contained HTML reports and PNG plots."""
