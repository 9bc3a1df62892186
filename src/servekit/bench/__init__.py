"""Load testing: the record store now; the runner and metrics scraper later."""
