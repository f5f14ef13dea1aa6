package agentspec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/mangohq/mango/api-server/internal/jsonx"
)

// Input is a create or update request body. Every member records whether
// it was present and whether it was null, because updates preserve omitted
// members and clear nulled ones.
type Input struct {
	Name              jsonx.Opt[string]             `json:"name"`
	Description       jsonx.Opt[string]             `json:"description"`
	System            jsonx.Opt[string]             `json:"system"`
	Model             jsonx.Opt[json.RawMessage]    `json:"model"`
	Tools             jsonx.Opt[[]json.RawMessage]  `json:"tools"`
	MCPServers        jsonx.Opt[[]json.RawMessage]  `json:"mcp_servers"`
	Metadata          jsonx.Opt[map[string]*string] `json:"metadata"`
	Skills            jsonx.Opt[[]json.RawMessage]  `json:"skills"`
	ExecutionIdentity jsonx.Opt[json.RawMessage]    `json:"execution_identity"`
	Multiagent        jsonx.Opt[json.RawMessage]    `json:"multiagent"`
	// Version is the update precondition; it is rejected on create.
	Version jsonx.Opt[int64] `json:"version"`
}

// ParseInput decodes a request body strictly.
func ParseInput(body []byte) (*Input, error) {
	in := new(Input)
	if err := jsonx.DecodeObject(body, in, ""); err != nil {
		return nil, err
	}
	return in, nil
}

// Create resolves a create request into a complete Spec.
func Create(in *Input) (*Spec, error) {
	if in.Version.Set {
		return nil, jsonx.Errorf("version", "is not accepted when creating an agent")
	}
	if !in.Name.Set || in.Name.Null {
		return nil, jsonx.Errorf("name", "is required")
	}
	if !in.Model.Set || in.Model.Null {
		return nil, jsonx.Errorf("model", "is required")
	}
	base := &Spec{
		Metadata:          map[string]string{},
		Tools:             []Tool{},
		MCPServers:        []MCPServer{},
		Skills:            []Skill{},
		ExecutionIdentity: ExecutionIdentity{Type: "service_account"},
		Multiagent:        json.RawMessage("null"),
	}
	return apply(base, in)
}

// CheckUpdate validates what an update request says on its own, before the
// current version is read (so a malformed precondition is a 400, not a 409).
func CheckUpdate(in *Input) error {
	if in.Version.Set && (in.Version.Null || in.Version.Value < 1) {
		return jsonx.Errorf("version", "must be an integer of at least 1")
	}
	if in.Name.Set && in.Name.Null {
		return jsonx.Errorf("name", "cannot be cleared")
	}
	if in.Model.Set && in.Model.Null {
		return jsonx.Errorf("model", "cannot be cleared")
	}
	return nil
}

// Update applies an update request to the current spec and returns the new
// one. The caller compares it with the current spec to detect a no-op.
func Update(current *Spec, in *Input) (*Spec, error) {
	if err := CheckUpdate(in); err != nil {
		return nil, err
	}
	next, err := clone(current)
	if err != nil {
		return nil, err
	}
	return apply(next, in)
}

// clone returns a deep copy of s. It fails only on a spec that does not
// encode (a malformed raw JSON field read back from storage): an internal
// error, not the client's.
func clone(s *Spec) (*Spec, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("agentspec: copy the current spec: %w", err)
	}
	out := new(Spec)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("agentspec: copy the current spec: %w", err)
	}
	return out, nil
}

func apply(s *Spec, in *Input) (*Spec, error) {
	if in.Name.Set {
		if err := CheckLen("name", in.Name.Value, 1, MaxNameLen); err != nil {
			return nil, err
		}
		s.Name = in.Name.Value
	}
	if in.Description.Set {
		if err := CheckLen("description", in.Description.Value, 0, MaxDescriptionLen); err != nil {
			return nil, err
		}
		s.Description = in.Description.Value
	}
	if in.System.Set {
		if err := CheckLen("system", in.System.Value, 0, MaxSystemLen); err != nil {
			return nil, err
		}
		s.System = in.System.Value
	}
	if in.Model.Set {
		m, err := parseModel(in.Model.Value)
		if err != nil {
			return nil, err
		}
		s.Model = *m
	}
	if in.Metadata.Set {
		md, err := PatchMetadata(s.Metadata, in.Metadata.Value, in.Metadata.Null)
		if err != nil {
			return nil, err
		}
		s.Metadata = md
	}
	if in.MCPServers.Set {
		servers, err := parseMCPServers(in.MCPServers.Value)
		if err != nil {
			return nil, err
		}
		s.MCPServers = servers
	}
	if in.Tools.Set {
		tools, err := parseTools(in.Tools.Value)
		if err != nil {
			return nil, err
		}
		s.Tools = tools
	}
	if in.Skills.Set {
		skills, err := parseSkills(in.Skills.Value)
		if err != nil {
			return nil, err
		}
		s.Skills = skills
	}
	if in.ExecutionIdentity.Set {
		id := ExecutionIdentity{Type: "service_account"}
		if !in.ExecutionIdentity.Null {
			parsed, err := parseExecutionIdentity(in.ExecutionIdentity.Value)
			if err != nil {
				return nil, err
			}
			id = *parsed
		}
		s.ExecutionIdentity = id
	}
	if in.Multiagent.Set {
		m := json.RawMessage("null")
		if !in.Multiagent.Null {
			merged, err := mergeMultiagent(s.Multiagent, in.Multiagent.Value)
			if err != nil {
				return nil, err
			}
			m = merged
		}
		s.Multiagent = m
	}
	if err := crossCheck(s); err != nil {
		return nil, err
	}
	return s, nil
}

// PatchMetadata applies a metadata patch: a string upserts a key, null
// deletes it. A null patch clears the bag. The result must respect the
// limits of the public API.
func PatchMetadata(current map[string]string, patch map[string]*string, clear bool) (map[string]string, error) {
	out := make(map[string]string, len(current)+len(patch))
	if !clear {
		maps.Copy(out, current)
	}
	for _, k := range slices.Sorted(maps.Keys(patch)) {
		v := patch[k]
		if err := CheckLen("metadata key", k, 1, MaxMetadataKeyLen); err != nil {
			return nil, err
		}
		if v == nil {
			delete(out, k)
			continue
		}
		if err := CheckLen(fmt.Sprintf("metadata[%q]", k), *v, 0, MaxMetadataValLen); err != nil {
			return nil, err
		}
		out[k] = *v
	}
	if len(out) > MaxMetadataPairs {
		return nil, jsonx.Errorf("metadata", "at most %d key-value pairs are allowed, got %d", MaxMetadataPairs, len(out))
	}
	return out, nil
}

// CheckLen checks that v is valid UTF-8 of minLen to maxLen characters,
// with an error naming field.
func CheckLen(field, v string, minLen, maxLen int) error {
	if !utf8.ValidString(v) {
		return jsonx.Errorf(field, "must be valid UTF-8")
	}
	n := utf8.RuneCountInString(v)
	if n < minLen {
		if minLen == 1 {
			return jsonx.Errorf(field, "must not be empty")
		}
		return jsonx.Errorf(field, "must be at least %d characters, got %d", minLen, n)
	}
	if n > maxLen {
		return jsonx.Errorf(field, "must be at most %d characters, got %d", maxLen, n)
	}
	return nil
}

var effortLevels = []string{"low", "medium", "high", "xhigh", "max"}

func parseModel(raw json.RawMessage) (*Model, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			return nil, jsonx.Errorf("model", "expected a string or an object")
		}
		if err := CheckLen("model", id, 1, MaxModelIDLen); err != nil {
			return nil, err
		}
		return &Model{ID: id, Speed: "standard"}, nil
	}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, jsonx.Errorf("model", "expected a model id string or a model_config object")
	}
	var in struct {
		ID           *string         `json:"id"`
		Effort       json.RawMessage `json:"effort"`
		Speed        *string         `json:"speed"`
		InferenceGeo *string         `json:"inference_geo"`
		Type         *string         `json:"type"`
	}
	if err := jsonx.Decode(raw, &in, "model"); err != nil {
		return nil, err
	}
	if in.Type != nil && *in.Type != "model_config" {
		return nil, jsonx.Errorf("model.type", "must be \"model_config\"")
	}
	if in.ID == nil {
		return nil, jsonx.Errorf("model.id", "is required")
	}
	if err := CheckLen("model.id", *in.ID, 1, MaxModelIDLen); err != nil {
		return nil, err
	}
	m := &Model{ID: *in.ID, Speed: "standard"}
	if in.Speed != nil {
		if *in.Speed != "standard" && *in.Speed != "fast" {
			return nil, jsonx.Errorf("model.speed", "must be \"standard\" or \"fast\", got %q", *in.Speed)
		}
		m.Speed = *in.Speed
	}
	if in.InferenceGeo != nil {
		if err := CheckLen("model.inference_geo", *in.InferenceGeo, 1, 64); err != nil {
			return nil, err
		}
		m.InferenceGeo = *in.InferenceGeo
	}
	if e := bytes.TrimSpace(in.Effort); len(e) > 0 && !bytes.Equal(e, []byte("null")) {
		level := ""
		if e[0] == '"' {
			_ = json.Unmarshal(e, &level)
		} else {
			var obj struct {
				Type string `json:"type"`
			}
			if err := jsonx.Decode(e, &obj, "model.effort"); err != nil {
				return nil, err
			}
			level = obj.Type
		}
		if !slices.Contains(effortLevels, level) {
			return nil, jsonx.Errorf("model.effort", "must be one of %s, got %q", strings.Join(effortLevels, ", "), level)
		}
		m.Effort = &Effort{Type: level}
	}
	return m, nil
}

func parseMCPServers(raws []json.RawMessage) ([]MCPServer, error) {
	if len(raws) > MaxMCPServers {
		return nil, jsonx.Errorf("mcp_servers", "at most %d servers are allowed, got %d", MaxMCPServers, len(raws))
	}
	out := make([]MCPServer, 0, len(raws))
	seen := map[string]bool{}
	for i, raw := range raws {
		path := fmt.Sprintf("mcp_servers[%d]", i)
		var in struct {
			Type *string `json:"type"`
			Name *string `json:"name"`
			URL  *string `json:"url"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		if in.Type != nil && *in.Type != "url" {
			return nil, jsonx.Errorf(path+".type", "must be \"url\", got %q", *in.Type)
		}
		if in.Name == nil {
			return nil, jsonx.Errorf(path+".name", "is required")
		}
		if err := CheckLen(path+".name", *in.Name, 1, 128); err != nil {
			return nil, err
		}
		if seen[*in.Name] {
			return nil, jsonx.Errorf(path+".name", "duplicate server name %q", *in.Name)
		}
		seen[*in.Name] = true
		if in.URL == nil {
			return nil, jsonx.Errorf(path+".url", "is required")
		}
		u, err := url.Parse(*in.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, jsonx.Errorf(path+".url", "must be an absolute http(s) URL")
		}
		if len(*in.URL) > 2048 {
			return nil, jsonx.Errorf(path+".url", "must be at most 2048 characters")
		}
		out = append(out, MCPServer{Type: "url", Name: *in.Name, URL: *in.URL})
	}
	return out, nil
}

var customToolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,128}$`)

func parseTools(raws []json.RawMessage) ([]Tool, error) {
	if len(raws) > MaxTools {
		return nil, jsonx.Errorf("tools", "at most %d tools are allowed, got %d", MaxTools, len(raws))
	}
	out := make([]Tool, 0, len(raws))
	customNames := map[string]bool{}
	mcpNames := map[string]bool{}
	haveToolset := false
	for i, raw := range raws {
		path := fmt.Sprintf("tools[%d]", i)
		typ, err := jsonx.ObjectType(raw, path)
		if err != nil {
			return nil, err
		}
		switch typ {
		case ToolsetType:
			if haveToolset {
				return nil, jsonx.Errorf(path, "%s may appear only once", ToolsetType)
			}
			haveToolset = true
			ts, err := parseAgentToolset(raw, path)
			if err != nil {
				return nil, err
			}
			out = append(out, Tool{Toolset: ts})
		case "mcp_toolset":
			ts, err := parseMCPToolset(raw, path)
			if err != nil {
				return nil, err
			}
			if mcpNames[ts.MCPServerName] {
				return nil, jsonx.Errorf(path+".mcp_server_name", "server %q already has an mcp_toolset", ts.MCPServerName)
			}
			mcpNames[ts.MCPServerName] = true
			out = append(out, Tool{MCP: ts})
		case "custom":
			ct, err := parseCustomTool(raw, path)
			if err != nil {
				return nil, err
			}
			if customNames[ct.Name] {
				return nil, jsonx.Errorf(path+".name", "duplicate custom tool name %q", ct.Name)
			}
			customNames[ct.Name] = true
			out = append(out, Tool{Custom: ct})
		case "":
			return nil, jsonx.Errorf(path+".type", "is required (one of %s, mcp_toolset, custom)", ToolsetType)
		default:
			return nil, jsonx.Errorf(path+".type", "unknown tool type %q (expected %s, mcp_toolset or custom)", typ, ToolsetType)
		}
	}
	return out, nil
}

type policyInput struct {
	Type string `json:"type"`
}

func parsePolicy(p *policyInput, path string) (Policy, error) {
	switch p.Type {
	case AlwaysAllow, AlwaysAsk:
		return Policy{Type: p.Type}, nil
	case "":
		return Policy{}, jsonx.Errorf(path+".type", "is required (always_allow or always_ask)")
	}
	return Policy{}, jsonx.Errorf(path+".type", "must be always_allow or always_ask, got %q", p.Type)
}

type defaultInput struct {
	Enabled          *bool        `json:"enabled"`
	PermissionPolicy *policyInput `json:"permission_policy"`
}

func resolveDefault(in *defaultInput, path string, fallback Policy) (ToolDefault, error) {
	d := ToolDefault{Enabled: true, PermissionPolicy: fallback}
	if in == nil {
		return d, nil
	}
	if in.Enabled != nil {
		d.Enabled = *in.Enabled
	}
	if in.PermissionPolicy != nil {
		p, err := parsePolicy(in.PermissionPolicy, path+".permission_policy")
		if err != nil {
			return d, err
		}
		d.PermissionPolicy = p
	}
	return d, nil
}

func parseAgentToolset(raw json.RawMessage, path string) (*AgentToolset, error) {
	var in struct {
		Type          string            `json:"type"`
		DefaultConfig *defaultInput     `json:"default_config"`
		Configs       []json.RawMessage `json:"configs"`
	}
	if err := jsonx.Decode(raw, &in, path); err != nil {
		return nil, err
	}
	def, err := resolveDefault(in.DefaultConfig, path+".default_config", Policy{Type: AlwaysAllow})
	if err != nil {
		return nil, err
	}
	explicit := map[string]BuiltinConfig{}
	for i, craw := range in.Configs {
		cpath := fmt.Sprintf("%s.configs[%d]", path, i)
		var c struct {
			Name             string           `json:"name"`
			Type             *string          `json:"type"`
			Enabled          *bool            `json:"enabled"`
			PermissionPolicy *policyInput     `json:"permission_policy"`
			AllowedDomains   []string         `json:"allowed_domains"`
			BlockedDomains   []string         `json:"blocked_domains"`
			MaxContentTokens *int64           `json:"max_content_tokens"`
			URLSources       *json.RawMessage `json:"url_sources"`
			UserLocation     *json.RawMessage `json:"user_location"`
		}
		if err := jsonx.Decode(craw, &c, cpath); err != nil {
			return nil, err
		}
		if !slices.Contains(BuiltinTools, c.Name) {
			return nil, jsonx.Errorf(cpath+".name", "unknown built-in tool %q (expected one of %s)", c.Name, strings.Join(BuiltinTools, ", "))
		}
		if _, dup := explicit[c.Name]; dup {
			return nil, jsonx.Errorf(cpath+".name", "duplicate config for %q", c.Name)
		}
		if c.Type != nil && *c.Type != c.Name {
			return nil, jsonx.Errorf(cpath+".type", "must equal the tool name %q", c.Name)
		}
		web := c.Name == "web_fetch" || c.Name == "web_search"
		if !web && (c.AllowedDomains != nil || c.BlockedDomains != nil || c.URLSources != nil || c.UserLocation != nil || c.MaxContentTokens != nil) {
			return nil, jsonx.Errorf(cpath, "domain, url_sources, user_location and max_content_tokens settings apply only to web_fetch and web_search")
		}
		if c.Name == "web_search" && (c.URLSources != nil || c.MaxContentTokens != nil) {
			return nil, jsonx.Errorf(cpath, "url_sources and max_content_tokens apply only to web_fetch")
		}
		if c.Name == "web_fetch" && c.UserLocation != nil {
			return nil, jsonx.Errorf(cpath, "user_location applies only to web_search")
		}
		if c.MaxContentTokens != nil && *c.MaxContentTokens < 1 {
			return nil, jsonx.Errorf(cpath+".max_content_tokens", "must be at least 1")
		}
		bc := BuiltinConfig{Name: c.Name, Type: c.Name, Enabled: def.Enabled, PermissionPolicy: def.PermissionPolicy,
			AllowedDomains: c.AllowedDomains, BlockedDomains: c.BlockedDomains, MaxContentTokens: c.MaxContentTokens}
		if web {
			bc.PermissionPolicy = Policy{Type: AlwaysAllow}
		}
		if c.URLSources != nil {
			if err := rawObject(*c.URLSources, cpath+".url_sources"); err != nil {
				return nil, err
			}
			bc.URLSources = *c.URLSources
		}
		if c.UserLocation != nil {
			if err := rawObject(*c.UserLocation, cpath+".user_location"); err != nil {
				return nil, err
			}
			bc.UserLocation = *c.UserLocation
		}
		if c.Enabled != nil {
			bc.Enabled = *c.Enabled
		}
		if c.PermissionPolicy != nil {
			p, err := parsePolicy(c.PermissionPolicy, cpath+".permission_policy")
			if err != nil {
				return nil, err
			}
			if web && p.Type != AlwaysAllow {
				return nil, jsonx.Errorf(cpath+".permission_policy.type", "%s supports only always_allow", c.Name)
			}
			bc.PermissionPolicy = p
		}
		explicit[c.Name] = bc
	}
	ts := &AgentToolset{Type: ToolsetType, DefaultConfig: def, Configs: make([]BuiltinConfig, 0, len(BuiltinTools))}
	for _, name := range BuiltinTools {
		if c, ok := explicit[name]; ok {
			ts.Configs = append(ts.Configs, c)
			continue
		}
		c := BuiltinConfig{Name: name, Type: name, Enabled: def.Enabled, PermissionPolicy: def.PermissionPolicy}
		if name == "web_fetch" || name == "web_search" {
			// Web tools run server-side at the model endpoint and cannot be
			// intercepted, so they never inherit always_ask.
			c.PermissionPolicy = Policy{Type: AlwaysAllow}
		}
		ts.Configs = append(ts.Configs, c)
	}
	return ts, nil
}

func parseMCPToolset(raw json.RawMessage, path string) (*MCPToolset, error) {
	var in struct {
		Type          string            `json:"type"`
		MCPServerName *string           `json:"mcp_server_name"`
		DefaultConfig *defaultInput     `json:"default_config"`
		Configs       []json.RawMessage `json:"configs"`
	}
	if err := jsonx.Decode(raw, &in, path); err != nil {
		return nil, err
	}
	if in.MCPServerName == nil || *in.MCPServerName == "" {
		return nil, jsonx.Errorf(path+".mcp_server_name", "is required")
	}
	def, err := resolveDefault(in.DefaultConfig, path+".default_config", Policy{Type: AlwaysAsk})
	if err != nil {
		return nil, err
	}
	ts := &MCPToolset{Type: "mcp_toolset", MCPServerName: *in.MCPServerName, DefaultConfig: def, Configs: []MCPToolConfig{}}
	seen := map[string]bool{}
	for i, craw := range in.Configs {
		cpath := fmt.Sprintf("%s.configs[%d]", path, i)
		var c struct {
			Name             *string      `json:"name"`
			Enabled          *bool        `json:"enabled"`
			PermissionPolicy *policyInput `json:"permission_policy"`
		}
		if err := jsonx.Decode(craw, &c, cpath); err != nil {
			return nil, err
		}
		if c.Name == nil {
			return nil, jsonx.Errorf(cpath+".name", "is required")
		}
		if err := CheckLen(cpath+".name", *c.Name, 1, 128); err != nil {
			return nil, err
		}
		if seen[*c.Name] {
			return nil, jsonx.Errorf(cpath+".name", "duplicate config for %q", *c.Name)
		}
		seen[*c.Name] = true
		mc := MCPToolConfig{Name: *c.Name, Enabled: def.Enabled, PermissionPolicy: def.PermissionPolicy}
		if c.Enabled != nil {
			mc.Enabled = *c.Enabled
		}
		if c.PermissionPolicy != nil {
			p, err := parsePolicy(c.PermissionPolicy, cpath+".permission_policy")
			if err != nil {
				return nil, err
			}
			mc.PermissionPolicy = p
		}
		ts.Configs = append(ts.Configs, mc)
	}
	return ts, nil
}

func parseCustomTool(raw json.RawMessage, path string) (*CustomTool, error) {
	var in struct {
		Type        string          `json:"type"`
		Name        *string         `json:"name"`
		Description *string         `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	if err := jsonx.Decode(raw, &in, path); err != nil {
		return nil, err
	}
	if in.Name == nil {
		return nil, jsonx.Errorf(path+".name", "is required")
	}
	if !customToolName.MatchString(*in.Name) {
		return nil, jsonx.Errorf(path+".name", "must match ^[a-zA-Z0-9_-]{1,128}$, got %q", *in.Name)
	}
	if in.Description == nil {
		return nil, jsonx.Errorf(path+".description", "is required")
	}
	if err := CheckLen(path+".description", *in.Description, 0, MaxDescriptionLen*4); err != nil {
		return nil, err
	}
	if len(in.InputSchema) == 0 || bytes.Equal(bytes.TrimSpace(in.InputSchema), []byte("null")) {
		return nil, jsonx.Errorf(path+".input_schema", "is required")
	}
	if err := rawObject(in.InputSchema, path+".input_schema"); err != nil {
		return nil, err
	}
	var schema map[string]json.RawMessage
	if err := json.Unmarshal(in.InputSchema, &schema); err != nil {
		return nil, jsonx.Errorf(path+".input_schema", "expected a JSON object")
	}
	var typ string
	if t, ok := schema["type"]; !ok || json.Unmarshal(t, &typ) != nil || typ != "object" {
		return nil, jsonx.Errorf(path+".input_schema.type", "must be \"object\"")
	}
	if p, ok := schema["properties"]; ok {
		if err := jsonx.Object(p, path+".input_schema.properties"); err != nil {
			return nil, err
		}
	}
	if r, ok := schema["required"]; ok {
		var req []string
		if err := json.Unmarshal(r, &req); err != nil {
			return nil, jsonx.Errorf(path+".input_schema.required", "expected an array of strings")
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, in.InputSchema); err != nil {
		return nil, jsonx.Errorf(path+".input_schema", "malformed JSON")
	}
	return &CustomTool{Type: "custom", Name: *in.Name, Description: *in.Description, InputSchema: compact.Bytes()}, nil
}

// rawObject checks a JSON object kept as the client sent it. Decoding
// replaces invalid UTF-8 in strings but raw JSON keeps it, and the spec is
// stored as PostgreSQL json, which must be valid UTF-8.
func rawObject(raw json.RawMessage, path string) error {
	if err := jsonx.Object(raw, path); err != nil {
		return err
	}
	if !utf8.Valid(raw) {
		return jsonx.Errorf(path, "must be valid UTF-8")
	}
	return nil
}

func parseSkills(raws []json.RawMessage) ([]Skill, error) {
	if len(raws) > MaxSkills {
		return nil, jsonx.Errorf("skills", "at most %d skills are allowed, got %d", MaxSkills, len(raws))
	}
	out := make([]Skill, 0, len(raws))
	for i, raw := range raws {
		path := fmt.Sprintf("skills[%d]", i)
		var in struct {
			Type    string  `json:"type"`
			SkillID string  `json:"skill_id"`
			Version *string `json:"version"`
		}
		if err := jsonx.Decode(raw, &in, path); err != nil {
			return nil, err
		}
		if in.Type != "anthropic" && in.Type != "custom" {
			return nil, jsonx.Errorf(path+".type", "must be \"anthropic\" or \"custom\", got %q", in.Type)
		}
		if err := CheckLen(path+".skill_id", in.SkillID, 1, 256); err != nil {
			return nil, err
		}
		v := "latest"
		if in.Version != nil {
			if err := CheckLen(path+".version", *in.Version, 1, 64); err != nil {
				return nil, err
			}
			v = *in.Version
		}
		out = append(out, Skill{Type: in.Type, SkillID: in.SkillID, Version: v})
	}
	return out, nil
}

func parseExecutionIdentity(raw json.RawMessage) (*ExecutionIdentity, error) {
	var in struct {
		Type    string  `json:"type"`
		RoleARN *string `json:"role_arn"`
	}
	if err := jsonx.Decode(raw, &in, "execution_identity"); err != nil {
		return nil, err
	}
	switch in.Type {
	case "service_account":
		if in.RoleARN != nil {
			return nil, jsonx.Errorf("execution_identity.role_arn", "applies only to type aws_role")
		}
		return &ExecutionIdentity{Type: in.Type}, nil
	case "aws_role":
		if in.RoleARN == nil || !strings.HasPrefix(*in.RoleARN, "arn:") || len(*in.RoleARN) > 2048 {
			return nil, jsonx.Errorf("execution_identity.role_arn", "must be an ARN (arn:...)")
		}
		return &ExecutionIdentity{Type: in.Type, RoleARN: *in.RoleARN}, nil
	}
	return nil, jsonx.Errorf("execution_identity.type", "must be \"service_account\" or \"aws_role\", got %q", in.Type)
}

// crossCheck enforces rules spanning several members: each mcp_toolset
// names a declared server and each declared server is used.
func crossCheck(s *Spec) error {
	declared := map[string]bool{}
	for _, srv := range s.MCPServers {
		declared[srv.Name] = true
	}
	used := map[string]bool{}
	for i, t := range s.Tools {
		if t.MCP == nil {
			continue
		}
		if !declared[t.MCP.MCPServerName] {
			return jsonx.Errorf(fmt.Sprintf("tools[%d].mcp_server_name", i), "no mcp_servers entry is named %q", t.MCP.MCPServerName)
		}
		used[t.MCP.MCPServerName] = true
	}
	for i, srv := range s.MCPServers {
		if !used[srv.Name] {
			return jsonx.Errorf(fmt.Sprintf("mcp_servers[%d]", i), "server %q is not referenced by any mcp_toolset in tools", srv.Name)
		}
	}
	return nil
}

// Equal reports whether two specs are identical, so an update that changes
// nothing does not create a new version.
func Equal(a, b *Spec) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}
