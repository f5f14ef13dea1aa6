package console

// providerRoutes registers the provider pages.
func (c *Console) providerRoutes() {}
