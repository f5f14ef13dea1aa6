package agentruntime

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Skill is one of the session's skills as the system prompt lists it.
type Skill struct {
	// Name is the skill's name (its folder's name).
	Name string
	// Description says what the skill is for, from its SKILL.md.
	Description string
	// Manifest is where the model reads the skill's SKILL.md: an absolute
	// path in the sandbox, or one relative to the working directory.
	Manifest string
}

// Bounds on what the system prompt takes from a skill (the Skills API's
// own limits): longer text is cut.
const (
	maxSkillName        = 64
	maxSkillDescription = 1024
	maxSkillPath        = 1024
)

// SystemWithSkills returns system followed by a section listing skills
// (progressive disclosure: the model sees each skill's name, description
// and where its SKILL.md is, and reads SKILL.md only when a task needs
// it). The section is separated from system by a blank line, or is the
// whole prompt when system is empty; system is returned unchanged when
// there are no skills. Skills are listed by name, whatever their order.
// Names, descriptions and paths are put on one line each (line breaks and
// other control characters become spaces) and cut to a bounded length, so
// that a description cannot add structure to the prompt.
func SystemWithSkills(system string, skills []Skill) string {
	if len(skills) == 0 {
		return system
	}
	sorted := slices.Clone(skills)
	slices.SortFunc(sorted, func(a, b Skill) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Manifest, b.Manifest))
	})
	var b strings.Builder
	if system != "" {
		b.WriteString(system)
		b.WriteString("\n\n")
	}
	b.WriteString("# Skills\n\n" +
		"These skills are available: folders of instructions, scripts and resources for particular tasks. " +
		"When a task needs one, first read its SKILL.md with the read tool and follow it; do not read skills the task does not need. " +
		"Scripts in a skill's folder can be run with bash.")
	if slices.ContainsFunc(sorted, func(s Skill) bool { return !strings.HasPrefix(s.Manifest, "/") }) {
		b.WriteString(" Relative paths are relative to the working directory.")
	}
	b.WriteString("\n")
	for _, s := range sorted {
		fmt.Fprintf(&b, "\n- %s (%s): %s", oneLine(s.Name, maxSkillName), oneLine(s.Manifest, maxSkillPath), oneLine(s.Description, maxSkillDescription))
	}
	return b.String()
}

// oneLine returns s on one line: control characters and white space
// (line and paragraph separators included) become single spaces, and what
// passes limit runes is cut and marked with an ellipsis.
func oneLine(s string, limit int) string {
	s = strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
	if r := []rune(s); len(r) > limit {
		s = string(r[:limit-1]) + "…"
	}
	return s
}
