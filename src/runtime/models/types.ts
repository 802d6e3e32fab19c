// The model adapter contract, as the runtime and model adapters import it (defined in the seam).
export type * from '../../seam/model-types.js';
