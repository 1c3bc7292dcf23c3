package notify

// DecodeWithNova is decodeWithNova for the external tests.
var DecodeWithNova = decodeWithNova
