package fork

// tutti-agent writes Codex's rollout format under its own home.
func init() { register(codexFormat("tutti-agent", "tutti-agent-home")) }
