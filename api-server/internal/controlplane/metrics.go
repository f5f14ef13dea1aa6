package controlplane

import (
	"context"
	"path"

	"github.com/prometheus/client_golang/prometheus"

	apimetrics "github.com/mangohq/mango/api-server/internal/metrics"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

type metrics struct {
	requests *prometheus.CounterVec
	appended prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mango_controlplane_requests_total",
		Help: "ControlPlane calls by method and gRPC status code.",
	}, []string{"method", "code"})
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	if err := reg.Register(requests); err != nil {
		return nil, err
	}
	appended, err := apimetrics.EventsAppended(reg, "controlplane")
	if err != nil {
		return nil, err
	}
	return &metrics{requests: requests, appended: appended}, nil
}

func (m *metrics) observe(fullMethod string, err error) {
	m.requests.WithLabelValues(path.Base(fullMethod), status.Code(err).String()).Inc()
}

func (m *metrics) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	m.observe(info.FullMethod, err)
	return resp, err
}

func (m *metrics) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	m.observe(info.FullMethod, err)
	return err
}
