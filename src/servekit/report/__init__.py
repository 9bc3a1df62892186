"""Reports: terminal tables now; Markdown, HTML and plots later."""
