package server

import (
	"net/url"
	"strings"
	"testing"
)

func TestLogRequest(t *testing.T) {
	tests := []struct {
		name, query, wantErr string
		check                func(t *testing.T, q url.Values)
	}{
		{name: "none", query: ""},
		{name: "all", query: "follow=true&previous=1&timestamps=true&tailLines=5&limitBytes=10&sinceSeconds=3"},
		{name: "since time", query: "sinceTime=2024-05-01T10:20:30Z"},
		{name: "zero tail", query: "tailLines=0"},
		{name: "negative tail", query: "tailLines=-1", wantErr: "tailLines=-1: must be at least 0"},
		{name: "zero limit", query: "limitBytes=0", wantErr: "limitBytes=0: must be at least 1"},
		{name: "words", query: "sinceSeconds=ten", wantErr: `sinceSeconds="ten": give a whole number`},
		{name: "bad bool", query: "follow=maybe", wantErr: `follow="maybe": give true or false`},
		{name: "bad time", query: "sinceTime=yesterday", wantErr: `sinceTime "yesterday": give an RFC 3339 time`},
		{name: "both since", query: "sinceSeconds=1&sinceTime=2024-05-01T10:20:30Z",
			wantErr: "at most one of sinceTime or sinceSeconds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := url.ParseQuery(tt.query)
			if err != nil {
				t.Fatal(err)
			}
			req, err := logRequest(q)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.name == "all" && !(req.Follow && req.Previous && req.Timestamps && *req.TailLines == 5 &&
				*req.LimitBytes == 10 && *req.SinceSeconds == 3) {
				t.Errorf("got %+v", req)
			}
			if tt.name == "since time" && req.SinceTime != "2024-05-01T10:20:30Z" {
				t.Errorf("sinceTime %q", req.SinceTime)
			}
		})
	}
}
