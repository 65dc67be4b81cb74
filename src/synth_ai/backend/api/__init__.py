"""The embedded backend's HTTP side: the FastAPI app (`app`), what its handlers share (`state`), key checks
(`auth`, `dashboard_auth`) and the routes, one module per resource (`routes/`)."""
