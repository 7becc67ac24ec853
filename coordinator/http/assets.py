"""The control room's packaged files (coordinator/http/static): which names are served, and
as what (coordinator/http/reads.py serves them; /openapi.json lists them)."""

from __future__ import annotations

# The control room's own script and style, shipped in the package (no CDN, no build): a fixed
# list of file names, never a path taken from the request. The script is native ES modules:
# control-room.js is the entry (<script type="module">) and imports the others by
# './name.js', so every module it reaches must be named here (tests/integration/
# test_control_room_assets.py walks the imports). Module scripts need a JavaScript type.
_CONTROL_ROOM_MODULES = (
    "control-room.js",  # entry: render() and the wiring
    "config.js",
    "api.js",
    "state.js",
    "dom.js",
    "format.js",
    "view.js",
    "widgets.js",
    "session.js",
    "credential.js",
    "alerts.js",
    "lanes.js",
    "timeline.js",
    "log.js",
    "receipts.js",
    "incidents.js",
    "computers.js",
    "evidence.js",
)
CONTROL_ROOM_ASSETS: dict[str, str] = {
    **{name: "text/javascript" for name in _CONTROL_ROOM_MODULES},
    "control-room.css": "text/css",
}
