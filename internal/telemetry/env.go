package telemetry

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The standard variables are read through the binary's getenv, as the
// rest of its configuration is (the SDK itself would read the process
// environment): the endpoint, headers, compression and timeout of the
// exporter, the sampler, the batch delay and the resource. TLS files
// (OTEL_EXPORTER_OTLP_CERTIFICATE ...) are left to the SDK.

// exporterClient builds the OTLP client of protocol from getenv.
func exporterClient(protocol string, getenv func(string) string) (otlptrace.Client, error) {
	endpoint := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	generic := endpoint == ""
	if generic {
		endpoint = firstSet(getenv, "OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	headers, err := parsePairs(firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"))
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %w", err)
	}
	gzip := firstSet(getenv, "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION") == "gzip"
	timeout, err := millis(getenv, "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT")
	if err != nil {
		return nil, err
	}
	if protocol == "grpc" {
		opts := []otlptracegrpc.Option{otlptracegrpc.WithHeaders(headers)}
		if endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		}
		if gzip {
			opts = append(opts, otlptracegrpc.WithCompressor("gzip"))
		}
		if timeout > 0 {
			opts = append(opts, otlptracegrpc.WithTimeout(timeout))
		}
		return otlptracegrpc.NewClient(opts...), nil
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithHeaders(headers)}
	if endpoint != "" {
		if generic { // the signal's path goes after the base URL
			endpoint = strings.TrimSuffix(endpoint, "/") + "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
	}
	if gzip {
		opts = append(opts, otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	}
	if timeout > 0 {
		opts = append(opts, otlptracehttp.WithTimeout(timeout))
	}
	return otlptracehttp.NewClient(opts...), nil
}

// sampler reads OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default
// parentbased_always_on).
func sampler(getenv func(string) string) (sdktrace.Sampler, error) {
	ratio := 1.0
	if arg := firstSet(getenv, "OTEL_TRACES_SAMPLER_ARG"); arg != "" {
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio between 0 and 1", arg)
		}
		ratio = r
	}
	switch s := firstSet(getenv, "OTEL_TRACES_SAMPLER"); s {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		return sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio)), nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER: %q is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio", s)
	}
}

// resourceAttrs reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (which
// wins over a service.name among the attributes).
func resourceAttrs(getenv func(string) string) ([]attribute.KeyValue, error) {
	pairs, err := parsePairs(getenv("OTEL_RESOURCE_ATTRIBUTES"))
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	if name := firstSet(getenv, "OTEL_SERVICE_NAME"); name != "" {
		pairs["service.name"] = name
	}
	out := make([]attribute.KeyValue, 0, len(pairs))
	for k, v := range pairs {
		out = append(out, attribute.String(k, v))
	}
	return out, nil
}

// parsePairs parses "k1=v1,k2=v2" with URL-encoded values.
func parsePairs(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, part := range strings.Split(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("%q is not key=value", part)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		out[strings.TrimSpace(k)] = dv
	}
	return out, nil
}

// millis reads the first set of names as milliseconds (0 when unset).
func millis(getenv func(string) string, names ...string) (time.Duration, error) {
	v := firstSet(getenv, names...)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s: %q is not a number of milliseconds", names[0], v)
	}
	return time.Duration(n) * time.Millisecond, nil
}
