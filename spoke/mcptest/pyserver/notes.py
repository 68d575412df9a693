"""notes: a stdlib-only MCP server (stdio) that keeps a user's notes as files.

It does what servers that keep state do: it creates its data directory
(os.makedirs), writes each note to a temporary file and renames it into
place, sets its mode and times (chmod, utime), renames and deletes notes
(rename, unlink) and removes the directory when the last note goes (rmdir).
Its data directory is $XDG_DATA_HOME/notes, else ~/.local/share/notes: no
path in its configuration, so a host that gives each user a home of their
own keeps each user's notes apart.
"""
import json
import os
import re
import sys
import time

NAME = {"type": "string", "pattern": "^[a-z0-9_-]{1,64}$", "description": "the note's name"}


def schema(props, required):
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


NOTES_OUT = schema({"notes": {"type": "array", "items": {"type": "string"}}}, ["notes"])
TOOLS = [
    {"name": "write_note", "description": "Saves a note under a name, replacing any note of that name.",
     "inputSchema": schema({"name": NAME, "text": {"type": "string", "maxLength": 4000}}, ["name", "text"]),
     "outputSchema": schema({"saved": {"type": "string"}, "bytes": {"type": "integer"}}, ["saved", "bytes"])},
    {"name": "read_note", "description": "Returns a note's text.",
     "inputSchema": schema({"name": NAME}, ["name"]),
     "outputSchema": schema({"name": {"type": "string"}, "text": {"type": "string"}}, ["name", "text"])},
    {"name": "rename_note", "description": "Renames a note.",
     "inputSchema": schema({"old": NAME, "new": NAME}, ["old", "new"]), "outputSchema": NOTES_OUT},
    {"name": "delete_note", "description": "Deletes a note.",
     "inputSchema": schema({"name": NAME}, ["name"]), "outputSchema": NOTES_OUT},
    {"name": "list_notes", "description": "Lists the names of the saved notes.",
     "inputSchema": schema({}, []), "outputSchema": NOTES_OUT},
]


def data_dir():
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "notes")


def path_of(name):
    if not re.fullmatch(r"[a-z0-9_-]{1,64}", name or ""):
        raise ValueError("invalid note name %r" % name)
    return os.path.join(data_dir(), name + ".txt")


def listing():
    d = data_dir()
    if not os.path.isdir(d):
        return {"notes": []}
    return {"notes": sorted(f[:-4] for f in os.listdir(d) if f.endswith(".txt"))}


def write_note(args):
    os.makedirs(data_dir(), mode=0o700, exist_ok=True)
    path, text = path_of(args["name"]), args["text"]
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    now = time.time()
    os.utime(tmp, (now, now))
    os.rename(tmp, path)
    return {"saved": args["name"], "bytes": len(text.encode("utf-8"))}


def read_note(args):
    with open(path_of(args["name"]), encoding="utf-8") as f:
        return {"name": args["name"], "text": f.read()}


def rename_note(args):
    os.rename(path_of(args["old"]), path_of(args["new"]))
    return listing()


def delete_note(args):
    os.unlink(path_of(args["name"]))
    if not listing()["notes"]:
        os.rmdir(data_dir())
    return listing()


CALLS = {"write_note": write_note, "read_note": read_note, "rename_note": rename_note,
         "delete_note": delete_note, "list_notes": lambda args: listing()}


def handle(method, params):
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"), "capabilities": {"tools": {}},
                "serverInfo": {"name": "notes", "version": "1.0.0"},
                "instructions": "notes keeps short named notes."}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        call = CALLS.get(params.get("name"))
        if call is None:
            raise LookupError("unknown tool %r" % params.get("name"))
        try:
            out = call(params.get("arguments") or {})
        except (OSError, ValueError, KeyError) as e:
            return {"content": [{"type": "text", "text": "%s: %s" % (type(e).__name__, e)}], "isError": True}
        return {"content": [{"type": "text", "text": json.dumps(out)}], "structuredContent": out}
    raise LookupError("method not found: %s" % method)


def main():
    for line in sys.stdin:
        msg = json.loads(line)
        if "id" not in msg:
            continue  # a notification
        reply = {"jsonrpc": "2.0", "id": msg["id"]}
        try:
            reply["result"] = handle(msg.get("method"), msg.get("params") or {})
        except LookupError as e:
            reply["error"] = {"code": -32601, "message": str(e)}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
