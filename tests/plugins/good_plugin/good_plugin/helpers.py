REASON = "the verified helper"
