"""`/docs` and `/openapi.json` behind the same key check as the API they describe (the embedded backend's
Bearer key, a task app's ENVIRONMENT_API_KEY): the schema lists every route and field, so it is not given to
anyone who may not call them. Create the app with `docs_url=None, openapi_url=None`, then call `add_keyed_docs`.
"""

from __future__ import annotations

from typing import Any


def add_keyed_docs(app: Any, dependencies: list[Any]) -> None:
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse, JSONResponse

    @app.get("/openapi.json", include_in_schema=False, dependencies=dependencies)
    def openapi_schema() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=dependencies)
    def swagger_ui() -> HTMLResponse:
        # The page fetches /openapi.json itself, so a browser needs a client that adds the key header.
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - docs")
