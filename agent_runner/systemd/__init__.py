"""systemd: unit names (names), the unit files (unit), install/uninstall plans (install),
running systemctl (systemctl) and the installed unit's state (state)."""
