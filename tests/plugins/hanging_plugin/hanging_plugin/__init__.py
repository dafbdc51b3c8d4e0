"""Never finishes importing: the describe call must end at its deadline."""

import time

while True:
    time.sleep(1)
