package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dockerfileStages splits a Dockerfile into its stages, each a list of
// instructions with comments dropped and continuation lines joined, keyed
// by the stage name (FROM ... AS name).
func dockerfileStages(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string][]string{}
	var name, pending string
	fromAs := regexp.MustCompile(`(?i)^FROM\s+\S+\s+AS\s+(\S+)$`)
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSpace(strings.TrimSuffix(line, `\`)) + " "
			continue
		}
		line, pending = pending+line, ""
		if m := fromAs.FindStringSubmatch(line); m != nil {
			name = m[1]
		}
		if name == "" {
			t.Fatalf("%s: instruction %q before a named stage (every stage needs FROM ... AS name)", path, line)
		}
		stages[name] = append(stages[name], line)
	}
	return stages
}

// TestReleaseDockerfileMatchesLocal keeps the multi-stage release build
// equivalent to the images `make images` builds: each final stage repeats
// the local Dockerfile's instructions, copying from the stage step (which
// runs the same scripts/build-images.sh --stage) instead of the context.
func TestReleaseDockerfileMatchesLocal(t *testing.T) {
	t.Parallel()
	release := dockerfileStages(t, filepath.Join("images", "release.Dockerfile"))
	if got := strings.Join(release["stage"], "\n"); !strings.Contains(got, "scripts/build-images.sh --stage /stage") {
		t.Errorf("release.Dockerfile's stage step does not run scripts/build-images.sh --stage /stage:\n%s", got)
	}
	local := map[string][]string{}
	for _, f := range []string{"api-server.Dockerfile", "execution-worker.Dockerfile"} {
		for name, ins := range dockerfileStages(t, filepath.Join("images", f)) {
			local[name] = ins
		}
	}
	for _, name := range []string{"api-server", "execution-worker", "execution-worker-local"} {
		want, got := local[name], release[name]
		if len(want) == 0 {
			t.Errorf("the local Dockerfiles have no stage %s", name)
			continue
		}
		normalized := make([]string, len(got))
		for i, ins := range got {
			normalized[i] = strings.Replace(ins, "COPY --from=stage /stage/", "COPY ", 1)
		}
		if strings.Join(normalized, "\n") != strings.Join(want, "\n") {
			t.Errorf("stage %s differs between release.Dockerfile and the local Dockerfile:\nrelease (normalized):\n%s\nlocal:\n%s",
				name, strings.Join(normalized, "\n"), strings.Join(want, "\n"))
		}
	}
	for name, ins := range local {
		if strings.HasPrefix(ins[0], "FROM scratch") || strings.HasPrefix(ins[0], "FROM execution-worker ") {
			continue
		}
		t.Errorf("local stage %s starts %q, want FROM scratch (nothing is pulled)", name, ins[0])
	}
	for _, name := range []string{"api-server", "execution-worker"} {
		if !contains(local[name], "USER 65532:65532") {
			t.Errorf("stage %s does not run as USER 65532:65532", name)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
