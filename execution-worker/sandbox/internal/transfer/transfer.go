// Package transfer holds the file-transfer pieces the remote sandbox
// adapters share, whatever their service's protocol: streaming
// multipart/form-data bodies (of a known length for one file, chunked for
// a tree), a tree as one tar stream with the shell script that extracts
// it, and the parser of "find | stat" listings.
//
// Nothing here holds a file in memory: bodies and archives are produced as
// they are read.
package transfer
