package httpapi

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mangohq/mango/api-server/internal/eventhub"
)

// Hub is the stream fan-out the event streams read from (package
// eventhub); the name stays for the composition root.
type Hub = eventhub.Hub

// NewHub returns an eventhub.Hub (see eventhub.New).
func NewHub(reg prometheus.Registerer, maxLag int) *Hub { return eventhub.New(reg, maxLag) }
