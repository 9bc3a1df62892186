"""Load testing (shell): the runner, metrics scraper, prompt sizing and the record store."""
