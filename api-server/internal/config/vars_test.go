package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/mangohq/mango/internal/netguard"
	"github.com/mangohq/mango/internal/pprofserve"
)

// TestVarsNameTheSharedVariables: the variables both binaries read are
// tagged with the names their packages export.
func TestVarsNameTheSharedVariables(t *testing.T) {
	t.Parallel()
	tags := map[string]bool{}
	typ := reflect.TypeFor[vars]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("env"), ",")
		tags[name] = true
	}
	for _, name := range []string{netguard.EnvAllowPrivate, pprofserve.EnvAddr} {
		if !tags[name] {
			t.Errorf("vars has no field tagged %s, want one", name)
		}
	}
}
