// Package usage prices model usage and renders a session's usage, stats
// and budget in the shapes of the public API: the price table per model
// id (defaults for the current Claude models, overridable with
// MANGO_MODEL_PRICES), the list cost of one model request, the budget
// parameter and the session.usage snapshot.
//
// Amounts are exact integers throughout: prices in nano-USD (10⁻⁹ USD)
// per token, costs in nano-USD, amounts shown in US cents.
package usage

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mangohq/mango/db"
)

// Price is a model's list price, in nano-USD per token (which is the same
// number as milli-USD per million tokens), and nano-USD per server web
// search.
type Price struct {
	Input, Output, CacheWrite5m, CacheWrite1h, CacheRead int64
	WebSearch                                            int64
}

// defaultWebSearchNanos is the list price of one web search: $10 per
// thousand.
const defaultWebSearchNanos = 10_000_000

// price builds a Price from input and output USD per million tokens given
// in milli-USD, with the usual cache multipliers: writes 1.25× (5 minutes)
// and 2× (1 hour) the input price, reads 0.1×.
func price(inputMilli, outputMilli int64) Price {
	return Price{Input: inputMilli, Output: outputMilli, CacheWrite5m: inputMilli * 5 / 4, CacheWrite1h: inputMilli * 2,
		CacheRead: inputMilli / 10, WebSearch: defaultWebSearchNanos}
}

// Defaults is the built-in price table: public list prices of the current
// Claude models in USD per million tokens (input/output): Opus 4 and 4.1
// $15/$75, Opus 4.5 $5/$25, Sonnet 4 and 4.5 $3/$15, Haiku 4.5 $1/$5,
// Haiku 3.5 $0.80/$4.
func Defaults() map[string]Price {
	return map[string]Price{
		"claude-opus-4-0":         price(15_000, 75_000),
		"claude-opus-4":           price(15_000, 75_000),
		"claude-opus-4-1":         price(15_000, 75_000),
		"claude-opus-4-5":         price(5_000, 25_000),
		"claude-sonnet-4-0":       price(3_000, 15_000),
		"claude-sonnet-4":         price(3_000, 15_000),
		"claude-sonnet-4-5":       price(3_000, 15_000),
		"claude-haiku-4-5":        price(1_000, 5_000),
		"claude-3-5-haiku":        price(800, 4_000),
		"claude-3-5-haiku-latest": price(800, 4_000),
	}
}

// Table is the price table the api-server uses.
type Table struct {
	prices map[string]Price
}

// NewTable returns a table of the given prices.
func NewTable(prices map[string]Price) *Table { return &Table{prices: prices} }

// DefaultTable is the table of Defaults.
func DefaultTable() *Table { return NewTable(Defaults()) }

var dated = regexp.MustCompile(`-\d{8}$`)

// Lookup returns the price of a model id: the entry of the exact id, else
// the entry of the id without a dated snapshot suffix
// ("claude-sonnet-4-5-20250929" is priced as "claude-sonnet-4-5").
func (t *Table) Lookup(model string) (Price, bool) {
	if p, ok := t.prices[model]; ok {
		return p, true
	}
	if base := dated.ReplaceAllString(model, ""); base != model {
		p, ok := t.prices[base]
		return p, ok
	}
	return Price{}, false
}

// Priced reports whether model has a list price.
func (t *Table) Priced(model string) bool {
	_, ok := t.Lookup(model)
	return ok
}

// Request is the usage of one model request.
type Request struct {
	Model                                           string
	InputTokens, OutputTokens, CacheReadInputTokens int64
	CacheCreation5m, CacheCreation1h                int64
	WebSearchRequests, WebFetchRequests             int64
}

// Cost returns the request's usage with its list cost, or with Unpriced
// set when its model has no price.
func (t *Table) Cost(r Request) db.Usage {
	u := db.Usage{InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, CacheReadInputTokens: r.CacheReadInputTokens,
		CacheCreation5m: r.CacheCreation5m, CacheCreation1h: r.CacheCreation1h,
		WebSearchRequests: r.WebSearchRequests, WebFetchRequests: r.WebFetchRequests}
	p, ok := t.Lookup(r.Model)
	if !ok {
		u.Unpriced = true
		return u
	}
	u.ListCostNanos = r.InputTokens*p.Input + r.OutputTokens*p.Output + r.CacheReadInputTokens*p.CacheRead +
		r.CacheCreation5m*p.CacheWrite5m + r.CacheCreation1h*p.CacheWrite1h + r.WebSearchRequests*p.WebSearch
	return u
}

// fileEntry is one model's entry in a MANGO_MODEL_PRICES file: USD per
// million tokens (web_search: USD per thousand searches) as decimals.
type fileEntry struct {
	Input        yaml.Node `yaml:"input"`
	Output       yaml.Node `yaml:"output"`
	CacheWrite5m yaml.Node `yaml:"cache_write_5m"`
	CacheWrite1h yaml.Node `yaml:"cache_write_1h"`
	CacheRead    yaml.Node `yaml:"cache_read"`
	WebSearch    yaml.Node `yaml:"web_search"`
}

// LoadFile reads a price file (JSON or YAML): an object mapping model ids
// to {input, output, cache_write_5m, cache_write_1h, cache_read,
// web_search}, in USD per million tokens (web_search per thousand
// searches). input and output are required; the cache prices default to
// 1.25×, 2× and 0.1× input, web_search to 10. Its entries are added to the
// defaults, replacing entries of the same id. Errors name the entry.
func LoadFile(path string) (*Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read price file: %w", err)
	}
	return Parse(data)
}

// Parse parses the contents of a price file (see LoadFile).
func Parse(data []byte) (*Table, error) {
	var entries map[string]fileEntry
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&entries); err != nil {
		return nil, fmt.Errorf("parse price file (an object of model id to prices): %w", err)
	}
	prices := Defaults()
	var errs []error
	for _, id := range slices.Sorted(maps.Keys(entries)) {
		p, err := entries[id].price()
		if err != nil {
			errs = append(errs, fmt.Errorf("model %q: %w", id, err))
			continue
		}
		if strings.TrimSpace(id) == "" {
			errs = append(errs, errors.New("an empty model id"))
			continue
		}
		prices[id] = p
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return NewTable(prices), nil
}

func (e fileEntry) price() (Price, error) {
	field := func(name string, n yaml.Node, scale int64, def *int64) (int64, error) {
		if n.Kind == 0 {
			if def == nil {
				return 0, fmt.Errorf("%s: is required", name)
			}
			return *def, nil
		}
		v, err := parseMilli(n.Value)
		if n.Kind != yaml.ScalarNode || err != nil {
			return 0, fmt.Errorf("%s: must be a non-negative decimal number of US dollars with at most 3 decimals, got %q", name, n.Value)
		}
		return v * scale, nil
	}
	var p Price
	var err error
	if p.Input, err = field("input", e.Input, 1, nil); err != nil {
		return p, err
	}
	if p.Output, err = field("output", e.Output, 1, nil); err != nil {
		return p, err
	}
	d := price(p.Input, p.Output)
	if p.CacheWrite5m, err = field("cache_write_5m", e.CacheWrite5m, 1, &d.CacheWrite5m); err != nil {
		return p, err
	}
	if p.CacheWrite1h, err = field("cache_write_1h", e.CacheWrite1h, 1, &d.CacheWrite1h); err != nil {
		return p, err
	}
	if p.CacheRead, err = field("cache_read", e.CacheRead, 1, &d.CacheRead); err != nil {
		return p, err
	}
	// USD per thousand searches = 10⁶ nano-USD per search per milli-USD.
	if p.WebSearch, err = field("web_search", e.WebSearch, 1000, &d.WebSearch); err != nil {
		return p, err
	}
	return p, nil
}

// parseMilli parses a non-negative decimal with at most three decimals
// into thousandths, exactly.
func parseMilli(s string) (int64, error) {
	whole, frac, _ := strings.Cut(strings.TrimSpace(s), ".")
	if whole == "" || len(frac) > 3 || strings.HasPrefix(whole, "-") || strings.HasPrefix(whole, "+") {
		return 0, errors.New("not a decimal")
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > 1_000_000_000 {
		return 0, errors.New("not a decimal")
	}
	f := int64(0)
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", 3-len(frac)), 10, 64); err != nil || f < 0 {
			return 0, errors.New("not a decimal")
		}
	}
	return w*1000 + f, nil
}
