"""The control room's files: native ES modules served from a fixed allow-list.

The page loads one entry module (`<script type="module">`), which imports the others by
`./name.js`. Walk those imports as the browser would, over HTTP: every module reached must
be in the package's asset list and be served with a JavaScript type (a module script with
any other type does not run), and nothing outside the list is served.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING

from coordinator.http.assets import CONTROL_ROOM_ASSETS

if TYPE_CHECKING:
    from tests.harness import Running

ASSETS = "/control-room/assets/"
MAX_MODULE_LINES = 400

# `<script …>` tags of the page, and their attributes
SCRIPT_RE = re.compile(r"<script\b([^>]*)>(.*?)</script>", re.DOTALL | re.IGNORECASE)
# static imports and re-exports: `import x from '…'`, `import {a,\n b} from "…"`,
# `import '…'`, `export {a} from '…'`, `export * from '…'`
IMPORT_RE = re.compile(
    r"""^\s*(?:import|export)\b(?:[^'";]*?\bfrom)?\s*(['"])(?P<spec>[^'"]+)\1""",
    re.MULTILINE,
)
LOCAL_SPEC_RE = re.compile(r"^\./(?P<name>[a-z][a-z0-9-]*\.js)$")
COMMENT_RE = re.compile(r"/\*.*?\*/|^\s*//[^\n]*", re.DOTALL | re.MULTILINE)


def _code(text: str) -> str:
    return COMMENT_RE.sub("", text)


def _imports(name: str, text: str) -> list[str]:
    """The module files `name` imports; each must be a plain `./file.js` of the same folder."""
    code = _code(text)
    assert not re.search(r"\bimport\s*\(", code), f"{name}: a dynamic import() is not walked"
    assert not re.search(r"\bimportScripts\b|\bnew\s+(?:Shared)?Worker\b", code), name
    names = []
    for m in IMPORT_RE.finditer(code):
        spec = m["spec"]
        local = LOCAL_SPEC_RE.match(spec)
        assert local, f"{name} imports {spec!r}: only ./file.js of the same folder is served"
        names.append(local["name"])
    return names


async def _entry(server: Running) -> str:
    page = await server.get("/control-room", token=None)
    assert page.status == 200
    csp = page.headers["Content-Security-Policy"]
    # module scripts are scripts: allowed from this origin only, no inline script at all
    directives = {d.split()[0]: d.split()[1:] for d in csp.split(";") if d.strip()}
    assert directives["script-src"] == ["'self'"], csp
    scripts = SCRIPT_RE.findall(page.text)
    assert len(scripts) == 1, scripts
    attrs, inline = scripts[0]
    assert inline.strip() == "", "no inline script"
    assert re.search(r"""\btype\s*=\s*["']module["']""", attrs), attrs
    src = re.search(r"""\bsrc\s*=\s*["']([^"']+)["']""", attrs)
    assert src and src[1].startswith(ASSETS), attrs
    return src[1].removeprefix(ASSETS)


async def test_every_module_the_entry_imports_is_served_as_javascript(server: Running) -> None:
    entry = await _entry(server)
    reached: dict[str, list[str]] = {}
    todo = [entry]
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        assert CONTROL_ROOM_ASSETS.get(name) == "text/javascript", f"{name} is not served as JS"
        r = await server.get(ASSETS + name, token=None)
        assert r.status == 200, (name, r.status)
        assert r.headers["Content-Type"].split(";")[0].strip() == "text/javascript", r.headers
        assert r.headers.get("X-Content-Type-Options") == "nosniff"
        lines = r.text.count("\n") + 1
        assert lines <= MAX_MODULE_LINES, f"{name}: {lines} lines"
        reached[name] = _imports(name, r.text)
        todo += reached[name]
    assert len(reached) > 1, reached  # the entry is not the whole script

    # and the list holds no script the page does not load: a stale name is a file served
    # for nothing
    listed = {n for n, t in CONTROL_ROOM_ASSETS.items() if t == "text/javascript"}
    assert listed == set(reached), (listed - set(reached), set(reached) - listed)
    # every module shipped in the package is in the list, and every name in it is a file
    static = resources.files("coordinator.http") / "static"
    shipped = {p.name for p in static.iterdir() if p.name.endswith(".js")}
    assert shipped == listed, (shipped - listed, listed - shipped)
    for name in CONTROL_ROOM_ASSETS:
        assert (static / name).is_file(), name


async def test_the_style_is_served_as_css(server: Running) -> None:
    r = await server.get(ASSETS + "control-room.css", token=None)
    assert r.status == 200
    assert r.headers["Content-Type"].split(";")[0].strip() == "text/css"


async def test_a_name_not_in_the_list_is_404(server: Running) -> None:
    for path in (
        "..%2Fapp.py",  # ../app.py, the slash encoded so it reaches the handler
        "%2e%2e%2fapp.py",
        "..%5Capp.py",
        "x.js",
        "app.py",
        "__init__.py",
        "control-room.html",  # a file of the folder, but served by /control-room only
        "CONTROL-ROOM.JS",
        "control-room.js%00.css",
        ".%2Fapi.js",
        "static%2Fapi.js",
    ):
        r = await server.get(ASSETS + path, token=None, raw_url=True)
        assert r.status == 404, (path, r.status)
        assert "javascript" not in r.headers.get("Content-Type", ""), path
    # a real climb in the path never reaches the asset route
    r = await server.get(ASSETS + "../app.py", token=None, raw_url=True)
    assert r.status == 404
