"""The loop: one round after another, the decisions between them, and the state they leave."""
