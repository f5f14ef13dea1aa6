package console

// resourceRoutes registers the pages of the API's other resources.
func (c *Console) resourceRoutes() {
	c.agentRoutes()
	c.environmentRoutes()
	c.fileRoutes()
	c.vaultRoutes()
	c.deploymentRoutes()
	c.webhookRoutes()
	c.providerRoutes()
}
