package agentruntime

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// MemoryStore is one of the session's memory stores as the system prompt
// lists it.
type MemoryStore struct {
	// Name is the store's name (snapshotted when it was attached).
	Name string
	// Path is where the store's memories are: an absolute path in the
	// sandbox (the mount path), or one relative to the working directory
	// (self-hosted sessions).
	Path string
	// Access is "read_write" or "read_only".
	Access string
	// Description is the store's description ("" : none).
	Description string
	// Instructions are the attachment's instructions ("" : none).
	Instructions string
}

// Bounds on what the system prompt takes from a memory store (the API's
// own limits): longer text is cut.
const (
	maxMemoryName         = 256
	maxMemoryPath         = 1024
	maxMemoryDescription  = 1024
	maxMemoryInstructions = 4096
)

// SystemWithMemory returns system followed by a section listing the
// session's memory stores: for each, its name, where its files are, its
// access, its description and the attachment's instructions. The section
// is separated from system by a blank line, or is the whole prompt when
// system is empty; system is returned unchanged when there are no
// stores. Stores are listed by path, then name, whatever their order. Every
// text is put on one line and cut to a bounded length, as in the skills
// section ([SystemWithSkills]).
func SystemWithMemory(system string, stores []MemoryStore) string {
	if len(stores) == 0 {
		return system
	}
	sorted := slices.Clone(stores)
	slices.SortFunc(sorted, func(a, b MemoryStore) int {
		return cmp.Or(cmp.Compare(a.Path, b.Path), cmp.Compare(a.Name, b.Name))
	})
	var b strings.Builder
	if system != "" {
		b.WriteString(system)
		b.WriteString("\n\n")
	}
	b.WriteString("# Memory\n\n" +
		"These memory stores are attached to this session: directories of text files that persist across sessions. " +
		"Read them when they may help with a task; in a read_write store, record what is worth remembering by creating or editing files " +
		"(what you change is saved when your turn ends). Files in a read_only store cannot be changed.")
	if slices.ContainsFunc(sorted, func(s MemoryStore) bool { return !strings.HasPrefix(s.Path, "/") }) {
		b.WriteString(" Relative paths are relative to the working directory.")
	}
	b.WriteString("\n")
	for _, s := range sorted {
		fmt.Fprintf(&b, "\n- %s (%s, %s)", oneLine(s.Name, maxMemoryName), oneLine(s.Path, maxMemoryPath), oneLine(s.Access, 16))
		if d := oneLine(s.Description, maxMemoryDescription); d != "" {
			fmt.Fprintf(&b, ": %s", d)
		}
		if in := oneLine(s.Instructions, maxMemoryInstructions); in != "" {
			fmt.Fprintf(&b, "\n  Instructions: %s", in)
		}
	}
	return b.String()
}
