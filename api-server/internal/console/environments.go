package console

// environmentRoutes registers the environment pages.
func (c *Console) environmentRoutes() {}
