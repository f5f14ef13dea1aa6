package console

// fileRoutes registers the file pages.
func (c *Console) fileRoutes() {}
