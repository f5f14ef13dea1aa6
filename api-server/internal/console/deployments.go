package console

// deploymentRoutes registers the deployment pages.
func (c *Console) deploymentRoutes() {}
