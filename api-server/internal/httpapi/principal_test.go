package httpapi

import (
	"testing"
)

// TestRouteClassesNameRealRoutes: every route the permission table names
// is served, so that a renamed route cannot silently fall back to
// API-key only.
func TestRouteClassesNameRealRoutes(t *testing.T) {
	a := New(Deps{})
	served := map[string]bool{}
	for _, r := range a.echo.Routes() {
		served[r.Method+" "+r.Path] = true
	}
	for route := range routeClasses {
		if !served[route] {
			t.Errorf("routeClasses names %q, which is not a route", route)
		}
	}
}
