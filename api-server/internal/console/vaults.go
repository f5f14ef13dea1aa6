package console

// vaultRoutes registers the vault pages.
func (c *Console) vaultRoutes() {}
