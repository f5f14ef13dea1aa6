package console

// agentRoutes registers the agent pages.
func (c *Console) agentRoutes() {}
