package agentruntime

// OutcomeBudgetReached: the session's budget is used up; the turn ended
// before its next model request.
const OutcomeBudgetReached Outcome = "budget_reached"

// BudgetReporter is implemented by a Store that learns from its commits
// whether the session's budget is used up (the ControlPlane answers it
// with every append, after counting the usage the append carried).
// BudgetExhausted must reflect the latest commit.
type BudgetReporter interface {
	BudgetExhausted() bool
}

// budgetReached reports whether the next model request must not be made:
// checked before every model request of a turn, the first included.
func (c *Core) budgetReached() bool {
	b, ok := c.Store.(BudgetReporter)
	return ok && b.BudgetExhausted()
}
