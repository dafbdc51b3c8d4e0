from agent_runner.plugins import PluginManifest

PLUGIN = PluginManifest(name="pth_plugin")
