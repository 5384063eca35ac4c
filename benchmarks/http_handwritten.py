"""A typical hand-written embedding server, the CPU lane's baseline:
``python -m benchmarks.http_handwritten``.

Starlette, served by uvicorn exactly as ``synapse serve`` is (same socket
and settings), with one route, ``POST /embed`` in TEI's shape, that reads
the JSON, runs the MiniLM forward pass of synapse-cpu's runtime (tokenise +
forward, the very code a synapse-cpu worker runs) in Starlette's thread pool
and answers the vectors as JSON. BLAS runs on one thread per call, as in a
synapse-cpu worker. Prints ``serving on URL`` on stderr; stops on SIGTERM.
"""

from __future__ import annotations

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from synapse_http.server import bind

from .http_server import serve_until_signal


def create_app() -> Starlette:
    from synapse_models import model as runtime

    model = runtime.load(runtime="numpy", threads=1)

    def forward(texts: list[str]) -> list[list[float]]:
        vectors = model.embed([model.tokenizer.encode(text) for text in texts])
        rows: list[list[float]] = vectors.tolist()
        return rows

    async def embed(request: Request) -> JSONResponse:
        inputs = (await request.json())["inputs"]
        texts = [inputs] if isinstance(inputs, str) else inputs
        return JSONResponse(await run_in_threadpool(forward, texts))

    return Starlette(routes=[Route("/embed", embed, methods=["POST"])])


async def main() -> None:
    await serve_until_signal(create_app(), bind("127.0.0.1", 0))


if __name__ == "__main__":
    anyio.run(main)
