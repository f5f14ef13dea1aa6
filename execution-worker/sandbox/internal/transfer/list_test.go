package transfer

import (
	"errors"
	"testing"
	"time"
)

func TestParseStatList(t *testing.T) {
	out := "3 1700000000 ./b.txt\n12 1700000001 ./dir with space/a\n5 1700000002 ./odd\nname\n0 0 ./z\n"
	files, err := ParseStatList("/mnt/session/outputs", out)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		path string
		size int64
	}{{"/mnt/session/outputs/b.txt", 3}, {"/mnt/session/outputs/dir with space/a", 12}, {"/mnt/session/outputs/odd\nname", 5}, {"/mnt/session/outputs/z", 0}}
	if len(files) != len(want) {
		t.Fatalf("ParseStatList = %+v, want %d files", files, len(want))
	}
	for i, w := range want {
		if files[i].Path != w.path || files[i].Size != w.size {
			t.Errorf("file %d = %q (%d bytes), want %q (%d bytes)", i, files[i].Path, files[i].Size, w.path, w.size)
		}
	}
	if !files[0].ModTime.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("ModTime = %v, want %v", files[0].ModTime, time.Unix(1700000000, 0))
	}
	if files, err := ParseStatList("/x", ""); err != nil || len(files) != 0 {
		t.Errorf("ParseStatList of no output = %+v, %v; want empty, nil", files, err)
	}
	if _, err := ParseStatList("/x", "garbage\n"); !errors.Is(err, ErrMalformedListing) {
		t.Errorf("ParseStatList of garbage = %v, want ErrMalformedListing", err)
	}
}
