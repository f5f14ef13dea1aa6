package config

import (
	"reflect"
	"strings"
	"testing"
)

// TestVarsReadEveryVariable: every variable named by an Env constant is a
// tag of vars, so the names documented and the names read are the same.
func TestVarsReadEveryVariable(t *testing.T) {
	t.Parallel()
	tags := map[string]bool{}
	typ := reflect.TypeFor[vars]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("env"), ",")
		tags[name] = true
	}
	for _, name := range []string{
		EnvTemporalHostPort, EnvTemporalNamespace, EnvTemporalConnectTimeout, EnvTemporalGzip, EnvSandbox, EnvSandboxAlias,
		EnvModel, EnvModelBaseURL, EnvModelAPIKey, EnvModelAuth, EnvModelID, EnvModelContextWindow, EnvCompactionModel,
		EnvCompactionThreshold, EnvAllowUnsafeLocal, EnvControlPlaneAddr, EnvReconcileInterval, EnvTaskQueuePrefix,
		EnvReconcileGrace, EnvWorkerToken, EnvWorkerID, EnvLogLevel, EnvLogFormat, EnvShutdownGrace, EnvShutdownTimeout,
		EnvSandboxLocality, EnvControlPlaneRetry, EnvMetricsAddr, EnvInterruptPush, EnvOutputsMaxFiles, EnvMCPAllowPrivate,
		EnvOutputsMaxBytes, EnvTranscriptCacheBytes, EnvControlPlaneTLS, EnvControlPlaneTLSCAFile, EnvControlPlaneTLSCertFile,
		EnvControlPlaneTLSKeyFile, EnvControlPlaneTLSServerName, EnvTemporalTLS, EnvTemporalTLSCAFile, EnvTemporalTLSCertFile,
		EnvTemporalTLSKeyFile, EnvTemporalTLSServerName, EnvSelfHostedToolTimeout, "MANGO_PPROF_ADDR",
	} {
		if !tags[name] {
			t.Errorf("vars has no field tagged %s, want one", name)
		}
	}
}
