"""Test agent: print a Claude result line for a 401 (invalid API key) and exit 1."""

import json
import sys

if __name__ == "__main__":
    print(
        json.dumps(
            {
                "type": "result",
                "subtype": "error_during_execution",
                "is_error": True,
                "api_error_status": 401,
                "result": "Invalid API key · Please run /login",
            }
        )
    )
    sys.exit(1)
