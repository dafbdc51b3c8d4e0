"""A dirty handler that does what `settings.mode` says: lie, fail, hang, write or read."""

import os
import time

from agent_runner.plugins import DirtyIntent, PluginManifest


def decide(view):
    mode = view.settings.get("mode")
    if mode == "outside":
        return DirtyIntent.commit("escape", paths=["../outside.txt"])
    if mode == "not_dirty":
        return DirtyIntent.commit("stale", paths=["never-touched.txt"])
    if mode == "protected":
        return DirtyIntent.commit("config", paths=["agent-runner.toml"])
    if mode == "raise":
        raise RuntimeError("the handler broke")
    if mode == "hang":
        time.sleep(3600)
    if mode == "write":
        with open(os.path.join(view.work_dir, "planted.txt"), "w") as planted:
            planted.write("written by a dirty handler\n")
        return DirtyIntent.ignore("wrote into the tree")
    if mode == "read":
        with open(os.path.join(view.work_dir, view.files[0])) as dirty:
            return DirtyIntent.stash(f"read: {dirty.read().strip()}")
    return DirtyIntent.stash("")


PLUGIN = PluginManifest(name="dirty_plugin", dirty_handlers=(decide,))
