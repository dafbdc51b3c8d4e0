from agent_runner.plugins import PluginManifest

PLUGIN = PluginManifest(name="someone_else")
