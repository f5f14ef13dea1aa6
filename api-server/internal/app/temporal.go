package app

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/mangohq/mango/api-server/internal/config"
	"github.com/mangohq/mango/api-server/internal/taskqueues"
	"github.com/mangohq/mango/db"
	"github.com/mangohq/mango/internal/temporalclient"
	"github.com/mangohq/mango/proto/sessionwf"
)

// temporalOptions returns the Temporal client's options: the frontend and
// namespace, and TLS when MANGO_TEMPORAL_TLS (or one of its files) is set.
// It logs whether the connection uses TLS.
func temporalOptions(cfg *config.Config, log *slog.Logger) (client.Options, error) {
	return temporalclient.Options(temporalclient.Settings{
		HostPort:  cfg.TemporalHostPort,
		Namespace: cfg.TemporalNamespace,
		TLS:       cfg.TemporalTLS,
		Gzip:      cfg.TemporalGzip,
	}, log)
}

// registerTaskQueues registers the collector of the providers' task queue
// backlogs (mango_task_queue_backlog...) with reg: the enabled providers
// and those any worker's heartbeat ever named.
func registerTaskQueues(reg prometheus.Registerer, cfg *config.Config, store *db.Store, tc client.Client, log *slog.Logger) error {
	c, err := taskqueues.New(taskqueues.Options{
		Service: tc.WorkflowService(), Namespace: cfg.TemporalNamespace, Queues: sessionwf.Queues{Prefix: cfg.TaskQueuePrefix},
		Logger: log.With("component", "task-queues"),
		Providers: func(ctx context.Context) ([]string, error) {
			workers, err := store.WorkerList(ctx)
			if err != nil {
				return nil, err
			}
			reported := make([]string, 0, len(workers))
			for _, w := range workers {
				reported = append(reported, w.Provider)
			}
			return taskqueues.Providers(providers(cfg), reported), nil
		},
	})
	if err != nil {
		return err
	}
	return reg.Register(c)
}
