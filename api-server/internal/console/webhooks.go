package console

// webhookRoutes registers the webhook pages.
func (c *Console) webhookRoutes() {}
