"""What keeps the agent's actions safe: the command classifier (`agent.safety.classifier`)."""
