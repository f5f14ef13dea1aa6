package defaults_test

import (
	"testing"
	"time"

	"github.com/mangohq/mango/execution-worker/internal/defaults"
)

func TestPositive(t *testing.T) {
	for _, tt := range []struct{ v, want time.Duration }{
		{v: 0, want: time.Minute},
		{v: -time.Second, want: time.Minute},
		{v: time.Second, want: time.Second},
	} {
		if got := defaults.Positive(tt.v, time.Minute); got != tt.want {
			t.Errorf("Positive(%v, 1m) = %v, want %v", tt.v, got, tt.want)
		}
	}
}

func TestLimit(t *testing.T) {
	for _, tt := range []struct{ v, want float64 }{
		{v: 0, want: 2},
		{v: -1, want: 0},
		{v: 0.5, want: 0.5},
	} {
		if got := defaults.Limit(tt.v, 2); got != tt.want {
			t.Errorf("Limit(%v, 2) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
