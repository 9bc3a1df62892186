"""Load testing (shell): runner, worker pool, metrics scraper, prompt sizing, record store."""
