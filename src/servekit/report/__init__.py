"""Reports (core views, shell writers): terminal tables, Markdown and HTML reports, plots."""
