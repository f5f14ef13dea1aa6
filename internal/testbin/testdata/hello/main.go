// Command hello prints "hello": the binary testbin's tests build.
package main

import "fmt"

func main() { fmt.Println("hello") }
