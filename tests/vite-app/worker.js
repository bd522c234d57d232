// The app's worker: importing `kiln-llm/worker` is all it takes.
import 'kiln-llm/worker';
